// libFuzzer: the pipeline stats codec (pipeline/stats_json.h), the reader behind
// `stoker doctor m.json` for `bench pipeline --json` files. What it reads, it writes, and
// the written text reads back to the same text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "pipeline/options_schema.h"
#include "pipeline/stats_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  stoker::StatsRunInfo run;
  auto st = stoker::StatsFromJson(text, "fuzz.json", &run);
  if (st.ok()) {
    std::string out = stoker::StatsToJson(*st, &run);
    stoker::StatsRunInfo run2;
    auto again = stoker::StatsFromJson(out, "again.json", &run2);
    if (!again.ok()) __builtin_trap();
    if (stoker::StatsToJson(*again, &run2) != out) __builtin_trap();
  }
  // The options' text parser (CLI values) on the same bytes, for every row.
  for (const auto& spec : stoker::PipelineOptionSchema()) {
    auto v = stoker::ParseOptionText(spec, text);
    if (v.ok()) stoker::CheckOption(spec, *v).status().IgnoreError();
  }
  return 0;
}
