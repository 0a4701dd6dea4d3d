// libFuzzer target: arbitrary bytes as a Delta Lake JSON commit (newline-delimited actions),
// applied to a log state twice (a second commit on top of the first), then as a schemaString,
// a dataset spec and a time-travel timestamp. Every malformed input must come back as a
// Status naming the file and line; nothing may crash, hang or read outside the input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "formats/delta_dataset.h"
#include "formats/delta_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  stoker::DeltaLogState state;
  state.track_removes_after = 0;
  stoker::ApplyDeltaCommit(in, "00000000000000000000.json", 0, &state).IgnoreError();
  stoker::ApplyDeltaCommit(in, "00000000000000000001.json", 1, &state).IgnoreError();
  for (const auto& [path, f] : state.files) {
    if (path.empty()) __builtin_trap();  // an add without a path must have been refused
  }
  stoker::ParseDeltaSchema(in).status().IgnoreError();
  std::string s(in.substr(0, 4096));
  stoker::ParseDeltaSpec(s).status().IgnoreError();
  stoker::ParseDeltaTimestamp(s).status().IgnoreError();
  stoker::DeltaPercentDecode(in);
  return 0;
}
