// libFuzzer: stoker's own Thrift compact-protocol reader and PageHeader parser (the
// direct page reads of the Parquet format), without Arrow.
#include <cstddef>
#include <cstdint>

#include "formats/parquet_thrift.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::PageHeaderInfo h;
  if (stoker::ParsePageHeader(data, size, &h) && h.header_len > size) __builtin_trap();
  // The generic skipper on every value type, from the same bytes.
  for (int t = 1; t <= 12; ++t) {
    stoker::CompactReader r(data, size);
    r.SkipValue(t, 0);
    if (r.pos() > size) __builtin_trap();
  }
  return 0;
}
