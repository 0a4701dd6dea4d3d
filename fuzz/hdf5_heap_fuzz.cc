// libFuzzer: stoker's direct HDF5 parser (variable-length references and global heap
// collections, read without libhdf5). The input is a file: its first 16 bytes are a
// vlen row, the collection is looked up where the row points (or right after the row).
#include <cstddef>
#include <cstdint>

#include "formats/hdf5_heap.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker;
  if (size < kHdf5VlenRef) return 0;
  const Hdf5VlenRef ref = ParseHdf5VlenRef(data);
  for (uint64_t coll : {ref.coll, uint64_t{kHdf5VlenRef}}) {
    if (coll == 0 || coll > size || size - coll < kHdf5HeapHeader) continue;
    auto cs = ParseHdf5HeapHeader(data + coll, coll, size);
    if (!cs.ok()) continue;
    if (*cs < kHdf5HeapHeader || *cs > size - coll) __builtin_trap();
    uint64_t first_index, first_size;
    Hdf5FirstHeapObject(data + coll, &first_index, &first_size);
    for (const Hdf5HeapObject& o : ListHdf5HeapObjects(data + coll, *cs, coll)) {
      if (o.index == 0 || o.offset < coll + kHdf5HeapHeader || o.size > coll + *cs - o.offset)
        __builtin_trap();
      if (o.index == ref.index) {
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < o.size; ++i) sink = sink + data[o.offset + i];
      }
    }
  }
  return 0;
}
