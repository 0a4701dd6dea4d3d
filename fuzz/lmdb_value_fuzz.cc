// libFuzzer target: stoker's LMDB value decoder (the part of the LMDB reader that parses
// bytes; LMDB's own B-tree pages are trusted by liblmdb and guarded by the file-size and
// in-map checks in lmdb_dataset.cc).
#include <cstddef>
#include <cstdint>

#include "formats/lmdb_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::Sample s;
  stoker::DecodeLmdbSample(data, size, &s).IgnoreError();
  stoker::SniffFieldName(data, size);
  return 0;
}
