// libFuzzer: the llm.c shard header parser, and a raw token store over the same bytes: a
// header that parses must give a token count that fits the file exactly.
#include <cstddef>
#include <cstdint>

#include "formats/tokens/token_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::TokenDType t;
  uint64_t n = 0;
  if (!stoker::ParseLlmcHeader("fuzz.bin", data, size, &t, &n).ok()) return 0;
  if (stoker::kLlmcHeaderBytes + n * stoker::TokenDTypeSize(t) != size) __builtin_trap();
  stoker::TokenSpan sp{data + stoker::kLlmcHeaderBytes, n, t};
  int64_t lo = 0, hi = 0;
  if (n > 0) sp.MinMax(0, n, &lo, &hi);
  if (lo > hi) __builtin_trap();
  return 0;
}
