#include "telemetry/pipeline_metrics.h"

#include <cstdint>
#include <cmath>

#include "pipeline/stats_json.h"

namespace stoker::telemetry {

bool LooksLikePipelineMetrics(std::string_view head) {
  if (head.find("\"stages\"") != head.npos) return true;
  // bench pipeline --json writes its keys sorted: a long skipped_items list can push
  // "stages" past the sniffed head.
  return head.find("\"samples_per_s\"") != head.npos &&
         head.find("\"consumer_wait_frac\"") != head.npos;
}

// The file is PipelineStats' JSON (pipeline/stats_json.h reads it); this keeps what the
// doctor uses and checks that the fractions are plausible.
Result<PipelineMetrics> ParsePipelineMetrics(std::string_view text, const std::string& name) {
  STOKER_ASSIGN_OR_RETURN(PipelineStats st, StatsFromJson(text, name));
  PipelineMetrics m;
  m.path = name;
  m.samples_per_s = st.samples_per_s;
  m.samples = st.samples;
  m.wall_s = st.wall_s;
  m.threads = std::max(0, st.threads);
  m.cpus = std::max(0, st.cpu_budget);
  m.consumer_wait_frac = st.consumer_wait_frac;
  m.bottleneck = st.bottleneck;
  if (st.cache.enabled) {
    m.cache = true;
    m.cache_hit_rate = st.cache.hit_rate;
    m.cache_stall_s = st.cache.stall_s;
    m.cache_fetched_bytes = st.cache.fetched_bytes;
    m.cache_stream_bytes = st.cache.stream_bytes;
    m.cache_shared_entries = st.cache.shared_entries;
    m.cache_evictions = st.cache.evictions;
    m.cache_limit_bytes = st.cache.limit_bytes;
  }
  m.source_counters = st.source_counters;
  for (const auto& s : st.stages) {
    StageMetrics sm;
    sm.name = s.name;
    sm.items = s.items;
    sm.threads = std::max(0, s.threads);
    sm.busy_frac = s.busy_frac;
    sm.wait_input_frac = s.wait_input_frac;
    sm.wait_output_frac = s.wait_output_frac;
    sm.cpu_s = std::isfinite(s.cpu_s) && s.cpu_s >= 0 ? s.cpu_s : -1;
    if (!(sm.busy_frac >= 0 && sm.busy_frac <= 1.5) || !(sm.wait_input_frac >= 0) ||
        !(sm.wait_output_frac >= 0)) {
      return InvalidArgument("{}: stage '{}' has fractions outside 0..1", name, sm.name);
    }
    m.stages.push_back(std::move(sm));
  }
  if (m.stages.empty()) return InvalidArgument("{}: pipeline metrics with no stages", name);
  return m;
}

Result<PipelineMetrics> ReadPipelineMetrics(Env* env, const std::string& path) {
  std::vector<uint8_t> data;
  STOKER_RETURN_IF_ERROR(env->ReadFile(path, &data));
  return ParsePipelineMetrics(
      std::string_view(reinterpret_cast<const char*>(data.data()), data.size()), path);
}

}  // namespace stoker::telemetry
