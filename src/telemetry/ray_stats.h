// Reader for Ray Data's per-operator stats: the text of `Dataset.stats()` (and of
// `ds._get_stats_summary().to_string()`, which adds the iterator's time breakdown when the
// dataset was consumed with iter_batches) as Ray 2.60 prints it. Ray has no public
// structured export of these stats, so the text users paste is the interface. Recorded
// examples: tests/traces/ray/.
//
//   Operator 2 MapBatches(slow_transform): 4 tasks executed, 4 blocks produced in 5.66s
//   * Remote wall time: 933.08ms min, 3.95s max, 2.3s mean, 9.19s total
//   * Remote cpu time: ...
//   * Output num rows per block: 12 min, 12 max, 12 mean, 48 total
//   ...
//   Dataset iterator time breakdown:
//       * Total time user thread is blocked by Ray Data iter_batches: 2.31s
//       * Total execution time for user thread: 842.97us
//
// Lines the reader knows must parse (a bad number is an error naming the file and line);
// lines it does not know are skipped, so a newer Ray's extra lines do not break it.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace stoker::telemetry {

// min / max / mean / total of a per-task or per-block quantity (NAN when not printed).
struct RayStat {
  double min = NAN, max = NAN, mean = NAN, total = NAN;
  bool present() const { return !std::isnan(total); }
};

struct RayOperatorStats {
  int number = 0;            // "Operator N" (a suboperator keeps its parent's N)
  std::string name;          // "MapBatches(slow_transform)", "ReadRange->MapBatches(f)"
  bool sub_operator = false;
  bool cached = false;       // "[execution cached]": no numbers
  int line = 0;              // 1-based line of its header
  int64_t tasks = -1;        // "N tasks executed" (-1: not printed)
  int64_t blocks = -1;       // "N blocks produced"
  double elapsed_s = NAN;    // "... produced in X s": the operator's wall time
  RayStat wall_s, cpu_s, transform_s, function_body_s;  // per task, seconds
  RayStat rows_per_block, bytes_per_block;              // per block
  int nodes = -1;            // "Tasks per node: ...; N nodes used"
  double rows_per_s = NAN;              // "Ray Data throughput"
  double single_task_rows_per_s = NAN;  // "Estimated single task throughput"
  // From the verbose "* Extra metrics: {...}" dict (NAN when absent).
  double extra_task_scheduling_s = NAN;          // task_scheduling_time_s
  double extra_submission_backpressure_s = NAN;  // task_submission_backpressure_time
  double extra_output_backpressure_s = NAN;      // task_output_backpressure_time_s
  double extra_spilled_bytes = NAN;              // obj_store_mem_spilled
  double extra_tasks_failed = NAN;               // num_tasks_failed
};

// "Dataset iterator time breakdown" (NAN when a line is not printed: Ray leaves out zeros).
struct RayIteratorStats {
  bool present = false;
  double total_s = NAN;          // Total time overall
  double init_s = NAN;           // ... in Ray Data iterator initialization code
  double blocked_s = NAN;        // ... user thread is blocked by Ray Data iter_batches
  double first_batch_s = NAN;    // ... waiting for the first batch after starting iteration
  double user_s = NAN;           // Total execution time for user thread
  RayStat get_ref_bundles_s, ray_get_s, batch_creation_s, format_s, collate_s, finalize_s;
  double split_coordinator_s = NAN;  // Streaming split coordinator overhead time
  // "Per-stage training-thread blocked time breakdown".
  double production_wait_s = NAN, data_transfer_s = NAN, batching_s = NAN,
         format_blocked_s = NAN, collate_blocked_s = NAN, finalize_blocked_s = NAN;
  int64_t batches = -1, rows = -1;  // Total batches / rows consumed
};

struct RayDataStats {
  std::string path;
  std::vector<RayOperatorStats> ops;
  RayIteratorStats iter;
  double rows_per_s = NAN;          // "Dataset throughput: Ray Data throughput"
  double cluster_spilled_mb = NAN;  // "Cluster memory: Spilled to disk: N MB"
  double cluster_restored_mb = NAN;
  double dataset_spilled_mb = NAN;  // "Dataset memory: Spilled to disk: N MB"
  double runtime_total_s = NAN;     // "Runtime Metrics: * Total" (verbose)
  int lines_skipped = 0;            // lines not recognised
};

// True when a text's head looks like Ray Data stats: an "Operator N <name>: ..." header
// with "blocks produced", "executed in" or "[execution cached]", or an iterator breakdown.
bool LooksLikeRayDataStats(std::string_view head);

// "862.71ms" -> 0.86271, "1.73s", "5.48us"; false when not a Ray-formatted duration.
bool ParseRayDuration(std::string_view s, double* out);

Result<RayDataStats> ParseRayDataStats(std::string_view text, const std::string& name);
Result<RayDataStats> ReadRayDataStats(Env* env, const std::string& path);

}  // namespace stoker::telemetry
