#include <cstdint>
#include "formats/parquet_thrift.h"

namespace stoker {

bool ParsePageHeader(const uint8_t* p, size_t n, PageHeaderInfo* h) {
  CompactReader r(p, n);
  bool ok = r.Struct(0, [&](int16_t id, int t) -> int {
    switch (id) {
      case 1: return r.I32(t, &h->type) ? 1 : -1;
      case 2: return r.I32(t, &h->uncompressed_size) ? 1 : -1;
      case 3: return r.I32(t, &h->compressed_size) ? 1 : -1;
      case 5:
        if (t != 12) return -1;
        return r.Struct(1, [&](int16_t id2, int t2) -> int {
                 if (id2 == 1) return r.I32(t2, &h->num_values) ? 1 : -1;
                 if (id2 == 2) return r.I32(t2, &h->encoding) ? 1 : -1;
                 return 0;
               })
                   ? 1
                   : -1;
      default: return 0;
    }
  });
  h->header_len = r.pos();
  return ok;
}

}  // namespace stoker
