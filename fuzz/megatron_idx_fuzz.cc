// libFuzzer: the Megatron .idx parser on arbitrary bytes. The first 8 bytes are the size of
// the .bin it is checked against; a parse that succeeds must describe documents that lie
// inside that .bin (the reader then hands out pointers into the mapping without checks).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "formats/tokens/token_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t bin_size;
  std::memcpy(&bin_size, data, 8);
  bin_size %= (1ull << 40);
  stoker::MegatronIndexView v;
  if (!stoker::ParseMegatronIndex("fuzz.idx", data + 8, size - 8, bin_size, &v).ok()) return 0;
  const uint64_t isz = stoker::TokenDTypeSize(v.dtype);
  for (uint64_t i = 0; i < v.sequence_count; ++i) {
    int64_t p = v.pointer(i);
    int32_t n = v.length(i);
    if (p < 0 || n < 0 || static_cast<uint64_t>(p) + static_cast<uint64_t>(n) * isz > bin_size)
      __builtin_trap();
  }
  return 0;
}
