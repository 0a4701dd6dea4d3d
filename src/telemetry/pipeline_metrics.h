// Reader for stoker's own pipeline metrics (`stoker bench pipeline --json`, the JSON form
// of PipelineStats in pipeline/pipeline.h): throughput, per-stage busy and wait fractions,
// the bottleneck stage and the consumer's wait (the GPU-starvation time).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace stoker::telemetry {

struct StageMetrics {
  std::string name;  // read, decode, augment/ops, batch (as the engine names them)
  uint64_t items = 0;
  int threads = 0;
  double busy_frac = 0, wait_input_frac = 0, wait_output_frac = 0;
  double cpu_s = -1;  // thread CPU time spent working (-1: not recorded)
};

struct PipelineMetrics {
  std::string path;
  double samples_per_s = 0;
  uint64_t samples = 0;
  double wall_s = 0;
  std::vector<StageMetrics> stages;
  std::string bottleneck;
  int threads = 0;
  int cpus = 0;  // cores available to the run, when recorded ("cpus" or "cpu_budget")
  double consumer_wait_frac = 0;
  // The node-wide cache (cache_dir), when the run had one.
  bool cache = false;
  double cache_hit_rate = 0, cache_stall_s = 0;
  uint64_t cache_fetched_bytes = 0, cache_stream_bytes = 0, cache_shared_entries = 0;
  uint64_t cache_evictions = 0;
  int64_t cache_limit_bytes = 0;
  // The source's own counters (Dataset::counters(): kafka_fetch_wait_s, kafka_lag, ...).
  std::map<std::string, double> source_counters;
};

// `text` is the JSON object; it may also be nested under "pipeline" or "stats".
Result<PipelineMetrics> ParsePipelineMetrics(std::string_view text, const std::string& name);
Result<PipelineMetrics> ReadPipelineMetrics(Env* env, const std::string& path);
// True when a JSON object's head looks like pipeline metrics: it has "stages", or (keys
// sorted, "stages" beyond the head) "samples_per_s" and "consumer_wait_frac". Telemetry's
// SniffInput (inputs.h) asks this after ruling out a trace object.
bool LooksLikePipelineMetrics(std::string_view head);

}  // namespace stoker::telemetry
