// libFuzzer target for the Ray Data stats reader (ds.stats() text): the parse, then the
// whole diagnosis and every rendering of whatever the input made.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "doctor/doctor.h"
#include "doctor/render.h"
#include "telemetry/ray_stats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  (void)stoker::telemetry::LooksLikeRayDataStats(s);
  auto st = stoker::telemetry::ParseRayDataStats(s, "fuzz.txt");
  if (st.ok()) {
    stoker::doctor::DoctorInputs in;
    in.ray_stats.push_back(std::move(*st));
    auto r = stoker::doctor::Diagnose(in);
    if (r.ok()) {
      (void)stoker::doctor::RenderText(*r);
      (void)stoker::doctor::RenderJson(*r);
      (void)stoker::doctor::RenderMarkdown(*r);
      (void)stoker::doctor::RenderHtml(*r);
    }
  }
  return 0;
}
