// libFuzzer: brace expansion of shard patterns ("train-{000..099}.tar", "{a,b}") on
// arbitrary text. Every expansion must be bounded, every result brace-free.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string pattern(reinterpret_cast<const char*>(data), size);
  auto r = stoker::ExpandBraces(pattern);
  if (!r.ok()) return 0;
  if (r->empty()) __builtin_trap();
  for (const auto& s : *r)
    if (s.find('{') != std::string::npos || s.find('}') != std::string::npos) __builtin_trap();
  return 0;
}
