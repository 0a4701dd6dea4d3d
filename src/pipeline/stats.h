// What a pipeline measured (Pipeline::Stats()), as plain structs: the engine fills them,
// stats_json.h writes and reads them (`bench pipeline --json`, Python's stats(), the
// doctor's pipeline input). No dependencies, so telemetry can read them without the engine.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace stoker {

// Where this process sits among the ranks (ResolveRank in pipeline.h).
struct RankInfo {
  int rank = 0, world_size = 1;
  std::string source;  // "options", "RANK/WORLD_SIZE", "OMPI_COMM_WORLD_*", "SLURM_*", "default"
};

struct StageStats {
  std::string name;
  int threads = 0;
  uint64_t items = 0;
  uint64_t bytes = 0;
  double busy_s = 0;         // wall time spent working (summed over threads)
  double cpu_s = 0;          // thread CPU time spent working
  double wait_input_s = 0;   // blocked because the input was empty
  double wait_output_s = 0;  // blocked because the output was full (backpressure)
  double queue_fill = 0;     // mean fill of the stage's input queue, 0..1
  // Fractions of (threads x wall time).
  double busy_frac = 0, wait_input_frac = 0, wait_output_frac = 0;
};

struct TuningEvent {
  double t_s = 0;
  std::string what;  // "decode threads 1 -> 2", "prefetch 2 -> 4"
};

// The node-wide cache in front of the dataset (cache_dir; io/cache_env.h). Bytes are this
// process's.
struct PipelineCacheStats {
  bool enabled = false;
  std::string dir;
  int64_t limit_bytes = 0;
  double hit_rate = 0;           // share of bytes read that did not come from the source in
                                 // this run (entries fetched by this process are misses)
  uint64_t hit_bytes = 0;        // read from local entries (warm or just fetched)
  uint64_t stream_bytes = 0;     // read through to the source, uncached
  uint64_t fetched_bytes = 0;    // copied from the source into the cache by this process
  uint64_t source_bytes = 0;     // every byte this process read from the source
  uint64_t fetches = 0;          // entries this process fetched
  uint64_t shared_entries = 0;   // entries found complete (fetched earlier or by another rank)
  uint64_t evictions = 0;
  uint64_t corrupt_entries = 0;  // entries that failed their check on open (fetched again)
  double stall_s = 0;            // readers waiting for a fetch (summed over reader threads)
  int64_t occupancy_bytes = 0;   // the directory at the last scan
  int64_t max_occupancy_bytes = 0;
};

struct PipelineStats {
  double wall_s = 0;
  uint64_t samples = 0, batches = 0, bytes_read = 0;
  double samples_per_s = 0, mb_per_s = 0;
  std::vector<StageStats> stages;  // read, decode, augment, batch
  std::string bottleneck;          // stage name, or "consumer" when the pipeline waits on it
  double consumer_wait_s = 0;      // time Next() blocked: the GPU-starvation time
  double consumer_wait_frac = 0;
  int threads = 0;                 // stage threads active at the end
  int prefetch = 0;
  int64_t memory_budget = 0;
  int cpu_budget = 0;              // cores the threads were sized for (0: not recorded)
  std::string budget_source;       // how the budgets were chosen ("options", the node share)
  int64_t buffer_bytes = 0;        // batch and sample buffer memory held
  uint64_t skipped = 0;
  std::vector<std::string> skipped_items;  // "key (location): reason"
  std::vector<std::string> warnings;       // batch pool past its budget, stalls (on_stall=warn)
  std::vector<TuningEvent> tuning;
  bool autotune = false;
  RankInfo rank;
  PipelineCacheStats cache;
  // What the data source itself reports (Dataset::notes() and counters()): "shard read
  // sequentially", gzip stream restarts, a stream's lag, a cache's hits. JSON: "source".
  std::vector<std::string> source_notes;
  std::map<std::string, double> source_counters;
};

}  // namespace stoker
