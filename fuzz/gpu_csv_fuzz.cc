// libFuzzer target for the GPU log readers (nvidia-smi CSV and dmon, dcgmi dmon, stoker
// watch samples) and the pipeline-metrics reader.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "doctor/doctor.h"
#include "doctor/render.h"
#include "telemetry/gpu_log.h"
#include "telemetry/pipeline_metrics.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  auto log = stoker::telemetry::ParseGpuLog(s, "fuzz.csv");
  if (log.ok()) {
    stoker::doctor::DoctorInputs in;
    in.gpu_logs.push_back(std::move(*log));
    auto r = stoker::doctor::Diagnose(in);
    if (r.ok()) {  // every rendering of whatever the input made
      (void)stoker::doctor::RenderText(*r);
      (void)stoker::doctor::RenderJson(*r);
      (void)stoker::doctor::RenderMarkdown(*r);
      (void)stoker::doctor::RenderHtml(*r);
    }
  }
  auto m = stoker::telemetry::ParsePipelineMetrics(s, "fuzz.json");
  (void)m;
  (void)stoker::telemetry::LooksLikeGpuLog(s);
  return 0;
}
