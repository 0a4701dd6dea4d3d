#include "formats/hdf5_heap.h"

#include <cstdint>
#include <cstring>

namespace stoker {
namespace {
uint64_t Le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}
}  // namespace

Hdf5VlenRef ParseHdf5VlenRef(const uint8_t* row) {
  return {Le(row, 4), Le(row + 4, 8), Le(row + 12, 4)};
}

Result<uint64_t> ParseHdf5HeapHeader(const uint8_t* h, uint64_t coll, uint64_t file_size) {
  if (std::memcmp(h, "GCOL", 4) != 0 || h[4] != 1)
    return Corrupt("no global heap collection at {}", coll);
  uint64_t cs = Le(h + 8, 8);
  if (cs < kHdf5HeapHeader || coll > file_size || cs > file_size - coll)
    return Corrupt("global heap collection at {} claims {} bytes", coll, cs);
  return cs;
}

void Hdf5FirstHeapObject(const uint8_t* h, uint64_t* index, uint64_t* size) {
  *index = Le(h + 16, 2);
  *size = Le(h + 24, 8);
}

std::vector<Hdf5HeapObject> ListHdf5HeapObjects(const uint8_t* bytes, uint64_t cs,
                                                uint64_t coll) {
  std::vector<Hdf5HeapObject> objs;
  for (uint64_t pos = 16; pos + 16 <= cs;) {
    uint64_t oi = Le(bytes + pos, 2), os = Le(bytes + pos + 8, 8);
    if (oi == 0 || os > cs - pos - 16) break;  // free space (or damage): the end
    objs.push_back({oi, coll + pos + 16, os});
    pos += 16 + ((os + 7) & ~uint64_t{7});
  }
  return objs;
}

}  // namespace stoker
