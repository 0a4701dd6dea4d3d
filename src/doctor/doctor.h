// The doctor: turns telemetry (profiler traces, GPU logs, stoker pipeline metrics, Ray Data
// stats) into a
// step-time breakdown, one primary verdict with a confidence, and findings with their
// evidence, the fix and the expected gain. The library never prints; render.h formats.
//
//   DoctorInputs in;
//   STOKER_ASSIGN_OR_RETURN(in, LoadInputs(Env::Default(), {"traces/"}, {}));
//   STOKER_ASSIGN_OR_RETURN(Report r, Diagnose(in));
//   std::string text = RenderText(r);
//
// Simple per-step timings (what a Python training loop can measure by itself) go through
// DiagnoseSteps(), which applies the same input-pipeline rules and wording:
//
//   std::vector<StepTiming> t = {{.data_wait_s = 0.031, .step_s = 0.100}, ...};
//   auto r = DiagnoseSteps(t, {.batch_size = 256});   // -> input_bound, 1.45x ...
//
// This is the entry point the Python `stoker.watch(loader)` helper binds (pybind11): it
// times `next(loader)` (data_wait_s) and the whole iteration (step_s) and hands the list
// over; Report and RenderText/RenderJson are what it shows.
//
// Thresholds (see docs/doctor.md for the sources): DataLoader share of the step >= 5% is a
// finding (PyTorch TensorBoard plugin rule), >= 20% the input_bound verdict (TensorFlow's
// input-pipeline analyzer, "highly input-bound"); exposed communication >= 10% (TensorBoard
// plugin); GPU idle caused by the host (launch/Python overhead, syncs) >= 15% (TensorFlow's
// kernel-launch / all-other "high"); rank imbalance >= 10% of the step; throttled while busy
// in >= 20% of busy samples; busy < 50% is low utilization (TensorBoard plugin, Nsight
// Systems gpu_time_util); memory >= 90% is at the limit (TensorBoard plugin).
// All thresholds are in Thresholds and can be changed by the caller.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/env.h"
#include "telemetry/gpu_log.h"
#include "telemetry/inputs.h"
#include "telemetry/pipeline_metrics.h"
#include "telemetry/ray_stats.h"
#include "telemetry/trace.h"

namespace stoker::doctor {

enum class Verdict {
  kInputBound,
  kComputeBound,
  kCommunicationBound,
  kImbalance,
  kHostBound,
  kThrottled,
  kHealthy,
  kUnknown,  // no evidence about where the time goes (e.g. host samples only): the report
             // says what to record next
};
const char* VerdictName(Verdict v);  // "input_bound", "compute_bound", ..., "unknown"

struct Thresholds {
  double input_warn = 0.05;         // TensorBoard plugin R1: DataLoader / step > 5%
  double input_verdict = 0.20;      // TensorFlow input analyzer: >= 20% "HIGHLY input-bound"
  double comm_warn = 0.03;          // TensorFlow (xprof) device collectives: 3%
  double comm_verdict = 0.10;       // TensorBoard plugin R4: communication / step > 10%
  double host_warn = 0.03;          // TensorFlow kernel launch / all-other: 3%
  double host_verdict = 0.15;       // TensorFlow kernel launch / all-other: 15%
  double imbalance_verdict = 0.10;  // stoker: straggler work excess / step
  double compute_bound = 0.80;      // stoker: compute share for compute_bound
  double low_util = 0.50;           // TensorBoard plugin R5, Nsight gpu_time_util: 50%
  double mem_limit = 0.90;          // TensorBoard plugin R7: peak > 90% of device memory
  double throttle_verdict = 0.20;   // stoker: share of busy samples with clocks throttled
  double starvation_gap_s = 0.5;    // Nsight Systems gpu_gaps: 500 ms
  double busy_util_pct = 50;        // a GPU log sample counts as busy at >= 50% util
};

struct DoctorOptions {
  int batch_size = 0;  // samples per step, for samples/s (0 = unknown)
  int cpus = 0;        // cores of the training machine (0 = unknown)
  Thresholds thresholds;
};

// Inputs, already parsed (LoadInputs reads and sniffs files).
struct DoctorInputs {
  std::vector<telemetry::TraceSummary> traces;  // one per rank
  std::vector<telemetry::GpuLog> gpu_logs;
  std::vector<telemetry::PipelineMetrics> pipelines;
  std::vector<telemetry::RayDataStats> ray_stats;  // Ray Data's ds.stats() text, parsed
  std::vector<std::string> notes;               // e.g. "skipped README.md in traces/"
  DoctorOptions options;
};

using LoadOptions = telemetry::InputReadOptions;

// Reads files and folders through telemetry::ReadInputs (telemetry/inputs.h: a folder is
// every *.json, *.json.gz, *.csv, *.log, *.txt in it, sorted; the type of each file is
// sniffed from its content). A file that is none of the known kinds, or is malformed, is an
// error naming the file (kInvalidArgument/kCorrupt).
Result<DoctorInputs> LoadInputs(Env* env, const std::vector<std::string>& paths,
                                const LoadOptions& opts = {});

// Fractions of step time (each in 0..1).
struct Fractions {
  double data_wait = 0;     // host waiting in DataLoader.__next__
  double compute = 0;       // GPU compute kernels (CPU-only traces: host operators)
  double comm = 0;          // communication not overlapped by compute (exposed)
  double comm_total = 0;    // all communication kernels (or host collectives)
  double comm_overlap = 0;  // share of communication overlapped by compute (of comm_total)
  double h2d = 0;           // host-to-device copies not overlapped by kernels
  double h2d_pageable = 0;  // ... of which from pageable memory
  double other_gpu = 0;     // other copies and memsets, not overlapped
  double idle = 0;          // GPU idle (CPU-only traces: host time outside any operator)
  double idle_data = 0;     // ... while the host waits for the DataLoader
  double idle_copy = 0;     // ... while the host is blocked in a cudaMemcpy* call (staged,
                            //     synchronous copies: pageable memory)
  double idle_sync = 0;     // ... right after a host synchronization drained the GPU
  double idle_host = 0;     // ... otherwise: the host does not launch fast enough
  double idle_optimizer = 0;  // part of idle_host while the host runs Optimizer.step/zero_grad
  double sync = 0;          // host time in cudaStreamSynchronize & co
  double optimizer = 0;     // Optimizer.step / zero_grad on the host
};

struct StepRow {
  int64_t number = -1;
  double start_s = 0, dur_s = 0;  // start relative to the first step
  Fractions f;
};

struct GpuRow {
  int device = -1;
  std::string name;
  Fractions f;
  uint64_t kernels = 0, comm_kernels = 0;
  double mean_kernel_us = 0;
  uint64_t h2d_pageable = 0, h2d_pinned = 0;
  int64_t h2d_pageable_bytes = 0;
};

struct TimelineSeg {
  int lane = 0;          // index into RankReport::timeline_lanes
  std::string kind;      // compute, comm, h2d, other, data, sync, optimizer, cpu
  double begin_s = 0, end_s = 0;  // relative to the first step
};

struct RankReport {
  int rank = 0;
  std::string path, format;
  bool gpu = false;
  std::string dataloader;  // "single-process", "multi-process" or ""
  int steps = 0;
  std::string steps_from = "ProfilerStep#N";  // or how the steps were inferred
  double step_s_mean = 0, step_s_p50 = 0, step_s_p90 = 0;
  double steps_per_s = 0, samples_per_s = 0;
  Fractions f;             // time-weighted over steps (and mean over active GPUs)
  std::vector<StepRow> step_rows;
  std::vector<GpuRow> gpus;
  uint64_t sync_calls = 0, launches = 0;
  uint64_t d2h_copy_calls = 0;  // host cudaMemcpy* calls whose copy is DtoH (read-backs)
  double kernels_per_step = 0;
  int64_t peak_mem_bytes = -1, total_mem_bytes = 0;
  bool tensor_cores_used = false, tc_capable = false, tc_eligible = false;
  bool dataparallel_multi_gpu = false;
  std::vector<std::string> timeline_lanes;
  std::vector<TimelineSeg> timeline;  // the first few steps, coalesced for drawing
};

struct Finding {
  std::string id;        // stable: "input.dataloader", "h2d.pageable", ...
  std::string severity;  // "high", "medium", "low", "info"
  std::string title;
  std::string evidence;  // numbers from the input
  std::string fix;
  std::optional<double> expected_speedup;  // e.g. 1.43 for 30 ms removed from a 100 ms step
  int rank = -1;         // the rank it is about, or -1
};

struct GpuLogSeries {
  int gpu = -1;
  std::vector<double> t_s, util, mem_used_frac, power_w, temp_c;  // downsampled (<= 600)
  std::vector<double> proc_cpu_cores, read_mib_s;  // stoker watch: the process tree
};

struct GpuLogReport {
  std::string path, format;
  int gpus = 0;
  uint64_t samples = 0;
  double duration_s = 0;
  double util_mean = NAN;           // %, over all samples and GPUs
  double busy_frac = NAN;           // share of samples with util >= busy_util_pct
  int starvation_periods = 0;       // runs below low_util lasting >= starvation_gap_s
  double starvation_s = 0, longest_starvation_s = 0;
  double mem_used_max_frac = NAN;   // max memory.used / memory.total
  double power_mean_w = NAN, power_max_w = NAN, temp_max_c = NAN;
  double throttled_busy_frac = NAN; // busy samples with power/thermal throttle bits
  int64_t throttle_bits_seen = 0;   // OR of the reasons seen while busy
  double throttled_sm_clock_mhz = NAN;  // mean SM clock in throttled busy samples
  double max_sm_clock_mhz = NAN;        // clocks.max.sm, else the highest SM clock seen
  double power_limit_w = NAN;
  // Per GPU: starved time and its share of that GPU's sampled time; the worst GPU.
  int starved_gpu = -1;
  double starved_gpu_frac = 0;
  std::vector<std::pair<int, double>> starvation_by_gpu;  // (gpu, starved seconds)
  double sm_active_mean = NAN, tensor_active_mean = NAN;
  double proc_cpu_cores_mean = NAN, cpus = NAN, read_mib_s_mean = NAN;
  std::vector<GpuLogSeries> series;
};

struct PipelineReport {
  std::string path;
  double samples_per_s = 0;
  std::string bottleneck, bottleneck_kind;  // kind: storage, decode, ops, batch, consumer
  double consumer_wait_frac = 0;
  double cores_busy = 0;  // sum over stages of busy_frac * threads
  int threads = 0, cpus = 0;
  bool cores_saturated = false;
  std::vector<telemetry::StageMetrics> stages;
  double wall_s = 0;
  // The node-wide cache (cache_dir), when the run had one (telemetry::PipelineMetrics).
  bool cache = false;
  double cache_hit_rate = 0, cache_stall_s = 0;
  uint64_t cache_fetched_bytes = 0, cache_stream_bytes = 0, cache_shared_entries = 0;
  uint64_t cache_evictions = 0;
  int64_t cache_limit_bytes = 0;
  std::map<std::string, double> source_counters;  // the source's (kafka_fetch_wait_s, ...)
};

// One Ray Data operator, as the doctor reads it (telemetry::RayOperatorStats).
struct RayOperatorRow {
  int number = 0;
  std::string name;
  int64_t tasks = -1, blocks = -1, rows = -1, bytes = -1;  // -1: not printed
  double elapsed_s = NAN;      // the operator's wall time ("blocks produced in")
  double wall_s = 0, cpu_s = 0;  // remote wall / CPU time summed over its tasks
  double wall_mean_s = NAN;    // per task
  double bytes_per_block = NAN;
  double share = 0;            // its wall_s / all operators' wall_s
  double concurrency = NAN;    // wall_s / elapsed_s: tasks running at a time, on average
  int nodes = -1;
};

// Ray Data's per-operator stats and the iterator's breakdown (telemetry::RayDataStats).
struct RayReport {
  std::string path;
  std::vector<RayOperatorRow> ops;
  int bottleneck = -1;        // index into ops: the largest share of remote wall time
  bool iterator = false;      // the "Dataset iterator time breakdown" was given
  double blocked_s = NAN;     // user thread blocked in iter_batches
  double first_batch_s = NAN; // ... of which waiting for the first batch
  double user_s = NAN;        // user code between batches
  double wait_s = NAN;        // blocked after the first batch
  double consumer_wait_frac = NAN;  // wait_s / (wait_s + user_s)
  double production_wait_s = NAN, data_transfer_s = NAN, batching_s = NAN, format_s = NAN,
         collate_s = NAN, finalize_s = NAN;
  int64_t batches = -1, rows = -1;
  double rows_per_s = NAN;    // the dataset's throughput
  double spilled_mb = NAN;    // cluster or dataset spill, when printed
};

struct CrossRank {
  int ranks = 0;
  double step_spread_s = 0, data_wait_spread_s = 0, comm_spread_s = 0;
  int straggler_rank = -1;
  double straggler_excess_s = 0;  // its work beyond the median of the others, per step
  std::string straggler_cause;    // data_wait, compute, host
};

struct Report {
  Verdict primary = Verdict::kHealthy;
  double confidence = 0;
  std::string summary;  // one sentence
  bool gpu = false;     // any GPU activity in the traces
  bool has_trace = false;
  int steps = 0;
  // "ProfilerStep#N" when every trace has them, else how the steps were inferred (the
  // ranks' sources joined with " / " when they differ).
  std::string steps_from = "ProfilerStep#N";
  double step_s = 0;    // mean over ranks
  double steps_per_s = 0, samples_per_s = 0;
  int batch_size = 0;
  Fractions breakdown;  // mean over ranks
  std::vector<RankReport> ranks;
  CrossRank cross;
  std::vector<Finding> findings;  // sorted by expected gain, then severity
  std::vector<GpuLogReport> gpu_logs;
  std::optional<PipelineReport> pipeline;
  std::optional<RayReport> ray;
  std::vector<std::string> inputs;  // "path (kind)"
  std::vector<std::string> notes;
};

Result<Report> Diagnose(const DoctorInputs& in);

// Per-step timings measured by the training loop itself.
struct StepTiming {
  double data_wait_s = 0;  // time blocked in next(loader)
  double step_s = 0;       // the whole iteration, including data_wait_s
};
// Same input-pipeline rules and wording as Diagnose(); kInvalidArgument for an empty list
// or inconsistent timings (data_wait_s > step_s, negative values).
Result<Report> DiagnoseSteps(const std::vector<StepTiming>& steps, const DoctorOptions& opts = {});

// The rule table, for `stoker doctor --list-rules` and docs/doctor.md: every finding with the
// condition it fires on (thresholds filled in from `th`), the time its expected speedup
// removes, and where the threshold comes from; and every cause that competes for the verdict.
struct RuleInfo {
  std::string id, applies_to, when, gain, source;
};
struct CauseInfo {
  std::string verdict, applies_to, score, threshold, source;
};
std::vector<RuleInfo> ListRules(const Thresholds& th = {});
std::vector<CauseInfo> ListCauses(const Thresholds& th = {});

// Per-trace analysis (exposed for tests).
RankReport AnalyzeTrace(const telemetry::TraceSummary& t, const DoctorOptions& opts);
GpuLogReport AnalyzeGpuLog(const telemetry::GpuLog& log, const Thresholds& th);
PipelineReport AnalyzePipeline(const telemetry::PipelineMetrics& m, int cpus);
RayReport AnalyzeRay(const telemetry::RayDataStats& s);

// Expected speedup from removing `removed_s` from a step of `step_s`: step / (step - removed).
double SpeedupFromRemoving(double step_s, double removed_s);

}  // namespace stoker::doctor
