// HDF5 global heap parsing for the direct reads of hdf5_dataset.cc, without libhdf5: the
// on-disk variable-length reference of a row and the global heap collection it names
// (HDF5 file format spec, "Variable-length data" and "Global Heap", version 1 collections,
// 8-byte lengths and addresses). Pure functions over bytes; fuzzed by fuzz/hdf5_heap_fuzz.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace stoker {

inline constexpr size_t kHdf5HeapHeader = 32;  // collection header + object 0's header
inline constexpr size_t kHdf5VlenRef = 16;

// The 16-byte raw row of a variable-length dataset.
struct Hdf5VlenRef {
  uint64_t count = 0;  // elements
  uint64_t coll = 0;   // file address of the global heap collection
  uint64_t index = 0;  // object index inside it
};
Hdf5VlenRef ParseHdf5VlenRef(const uint8_t* row);

// Checks the first 32 bytes of the collection at `coll` ("GCOL", version 1) and returns
// the collection size it claims, which fits in the file; kCorrupt otherwise (no file name:
// the caller adds it).
Result<uint64_t> ParseHdf5HeapHeader(const uint8_t* h, uint64_t coll, uint64_t file_size);

// The first object of a collection, as listed in its header bytes (index, size).
void Hdf5FirstHeapObject(const uint8_t* h, uint64_t* index, uint64_t* size);

struct Hdf5HeapObject {
  uint64_t index = 0, offset = 0, size = 0;  // offset: file address of the object's data
};
// Lists the objects of the collection whose `cs` bytes (header included) are `bytes`,
// located at file address `coll`. Stops at the free-space object (index 0) or at the first
// object that would not fit; every listed object lies inside the collection.
std::vector<Hdf5HeapObject> ListHdf5HeapObjects(const uint8_t* bytes, uint64_t cs, uint64_t coll);

}  // namespace stoker
