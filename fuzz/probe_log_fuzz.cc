// libFuzzer target for the stoker watch probe's JSON-lines reports (telemetry/probe_log.h):
// every line of the input applied to one process record, as the watch's reader does.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "telemetry/probe_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  stoker::telemetry::ProbeProcess p;
  size_t start = 0;
  while (start <= s.size()) {
    size_t nl = s.find('\n', start);
    if (nl == std::string_view::npos) nl = s.size();
    (void)stoker::telemetry::ApplyProbeLine(s.substr(start, nl - start), &p);
    start = nl + 1;
  }
  (void)p.main_loader();
  (void)p.steps();
  return 0;
}
