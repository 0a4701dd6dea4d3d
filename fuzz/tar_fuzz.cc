// libFuzzer: the tar header scanner and WebDataset grouping on arbitrary bytes.
#include <cstddef>
#include <cstdint>

#include "io/memory_file.h"
#include "formats/tar.h"
#include "formats/wds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::MemoryFile f("fuzz.tar", data, size);
  stoker::TarScan scan = stoker::ScanTar(f);
  for (const auto& m : scan.members) {
    if (m.data_offset + m.size > size || m.data_offset % 512 != 0) __builtin_trap();
  }
  stoker::WdsShardIndex idx;
  stoker::GroupWdsMembers("fuzz.tar", scan.members, &idx).IgnoreError();
  // The index text must parse back to the same grouping.
  std::string text = stoker::FormatWdsIndex(idx);
  stoker::WdsShardIndex back;
  stoker::ParseWdsIndex(text, "fuzz.tar", size, &back).IgnoreError();
  // Arbitrary index text must not crash either.
  std::string raw(reinterpret_cast<const char*>(data), size);
  stoker::ParseWdsIndex(raw, "fuzz.tar", 1 << 20, &back).IgnoreError();
  return 0;
}
