// PipelineStats to and from JSON, in one place. `stoker bench pipeline --json` writes it,
// Python's Pipeline.stats() returns it as a dict, and the doctor reads it back
// (telemetry/pipeline_metrics.cc). Keys (stable; docs/cli/bench-pipeline.md lists them):
//   samples_per_s, mb_per_s, samples, batches, bytes_read, wall_s, bottleneck, threads,
//   prefetch, autotune, memory_budget_bytes, buffer_bytes, cpu_budget, budget_source,
//   consumer_wait_s, consumer_wait_frac, rank, world_size, rank_source, skipped,
//   skipped_items, stages [{name, threads, items, bytes, busy_s, cpu_s, wait_input_s,
//   wait_output_s, busy_frac, wait_input_frac, wait_output_frac, queue_fill}],
//   tuning [{t_s, what}], cache {dir, limit_bytes, hit_rate, hit_bytes, stream_bytes,
//   fetched_bytes, source_bytes, fetches, shared_entries, evictions, corrupt_entries,
//   stall_s, occupancy_bytes, max_occupancy_bytes} (only with cache_dir)
// plus, for a run (StatsRunInfo): data, epochs, batch_size, peak_rss_bytes.
//
// Reading: unknown keys are ignored (files from newer versions read), a missing key keeps
// its default (a stage's cpu_s reads -1: "not recorded"), null reads as missing, a key of
// the wrong type is an error naming the file and the key. The object may also be nested
// under "pipeline" or "stats".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "pipeline/stats.h"

namespace stoker {

// What a run adds beside the pipeline's own stats.
struct StatsRunInfo {
  std::string data;             // the dataset spec
  int epochs = 0;               // 0: not written
  int batch_size = 0;           // 0: not written
  int64_t peak_rss_bytes = -1;  // process peak RSS; -1: not written
};

// `indent` < 0: one line.
std::string StatsToJson(const PipelineStats& st, const StatsRunInfo* run = nullptr,
                        int indent = 2);
// `name` (a path, usually) is what error messages call the input.
Result<PipelineStats> StatsFromJson(std::string_view text, const std::string& name,
                                    StatsRunInfo* run = nullptr);

}  // namespace stoker
