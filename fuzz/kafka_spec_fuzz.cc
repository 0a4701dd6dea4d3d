// libFuzzer: the kafka: spec parser and the base64 decoder of JSON members on arbitrary
// text. A spec that parses must round-trip through KafkaSpecWithRanges (its pinned form
// parses back to the same window and options); base64 output is at most 3/4 of the input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/kafka_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<uint8_t> out;
  if (stoker::DecodeBase64(text, &out) && out.size() > size * 3 / 4 + 3) __builtin_trap();
  auto s = stoker::ParseKafkaSpec(text);
  if (!s.ok()) return 0;
  std::map<int32_t, std::pair<int64_t, int64_t>> ranges = s->ranges;
  if (ranges.empty()) ranges[0] = {0, 1};
  std::string pinned = stoker::KafkaSpecWithRanges(*s, ranges);
  if (pinned.rfind("kafka:", 0) != 0) __builtin_trap();
  auto back = stoker::ParseKafkaSpec(pinned.substr(6));
  // A topic or option value holding '&' or '?' does not survive pinning: the parser refuses
  // such a spec's pinned form, never reads another window from it.
  if (back.ok() && (back->ranges != ranges || back->topic != s->topic ||
                    back->value != s->value || back->meta != s->meta))
    __builtin_trap();
  return 0;
}
