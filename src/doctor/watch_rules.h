// The doctor's rules for what `stoker watch`'s in-process probe measures: per-step data
// wait in each rank's DataLoader loop, the DataLoader's settings, and the CPU of the
// training processes and of their DataLoader workers (from the PIDs the probe reports).
//
// Each rule is one function of ProbeFacts that returns a Finding or nothing; the verdict
// says which of "too few workers", "workers CPU-bound", "storage" and "the main process"
// holds an input-bound job back, and `unknown` (with what to record next) where nothing
// says it. DiagnoseWatch() combines the rules with the samples (and a profiler window's
// traces, when the probe wrote one) through the ordinary Diagnose().
//
// Thresholds (docs/doctor.md, "the probe"): a process "busy" at >= 0.7 cores of demand
// (on-CPU plus waiting for a CPU, from /proc/<pid>/schedstat, so a busy machine does not
// make a CPU-bound worker look idle); "cores free" when the job's demand leaves >= 0.75 of
// a core; "storage" when the loading processes spend >= 20% of their samples in state D
// (uninterruptible: disk, page-in) or the machine >= 10% in iowait, or major faults exceed
// 50/s.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "doctor/doctor.h"

namespace stoker::doctor {

struct ProbeRank {
  int rank = 0;
  int pid = 0;
  std::vector<StepTiming> steps;   // host clock (or the GPU's, when CUDA events resolved)
  bool gpu_timing = false;
  double wait_s = 0, step_s = 0;   // sums over steps
};

struct ProbeFacts {
  std::vector<ProbeRank> ranks;   // processes with a DataLoader loop, by rank
  // The (first rank's) training DataLoader's settings; -1 unknown.
  int num_workers = -1, prefetch_factor = -1, batch_size = -1;
  bool pin_memory = false, persistent_workers = false, settings_known = false;
  int worker_pids = 0;            // workers reported (all ranks)
  bool cuda = false;              // CUDA events timed the steps
  // CPU attribution over the training loop (NaN: not measured).
  double cpus = NAN;
  double main_cores = NAN, main_demand = NAN, main_disk_wait_frac = NAN;
  double worker_cores = NAN, worker_demand = NAN, worker_disk_wait_frac = NAN;
  double tree_demand = NAN, machine_busy_cores = NAN, iowait_frac = NAN;
  double busiest_core_frac = NAN;
  int saturated_cores = -1;
  double majflt_per_s = NAN, read_mib_s = NAN;
  // What could not be measured, for the notes (said, never hidden).
  std::vector<std::string> notes;

  double wait_frac() const;  // all ranks' waits over all ranks' steps
  double step_s() const;     // mean step over ranks
};

// The rules: each returns a finding when its condition holds (see the header comment).
std::optional<Finding> RuleTooFewWorkers(const ProbeFacts& p, const Thresholds& th);
std::optional<Finding> RuleWorkersCpuBound(const ProbeFacts& p, const Thresholds& th);
std::optional<Finding> RuleStorage(const ProbeFacts& p, const Thresholds& th);
std::optional<Finding> RuleMainProcess(const ProbeFacts& p, const Thresholds& th);
std::optional<Finding> RuleInputContention(const ProbeFacts& p, const Thresholds& th);
std::optional<Finding> RuleInputCauseUnknown(const ProbeFacts& p, const Thresholds& th);
std::optional<Finding> RuleRankStraggler(const ProbeFacts& p, const Thresholds& th);
std::optional<Finding> RuleCpuSplit(const ProbeFacts& p, const Thresholds& th);
std::optional<Finding> RuleCpuContention(const ProbeFacts& p, const Thresholds& th);
std::optional<Finding> RuleLoaderSettings(const ProbeFacts& p, const Thresholds& th);

// The rules in order, for the doctor's rule table.
struct ProbeRule {
  const char* id;
  std::optional<Finding> (*fn)(const ProbeFacts&, const Thresholds&);
  const char* when;    // as Rule::when: thresholds as {field}; listed by ListRules()
  const char* gain;    // what the fix is about / its expected gain, or ""
};
const std::vector<ProbeRule>& ProbeRules();

// The cause (finding id) that the verdict names, or "" when the job is not input-bound.
std::string InputCause(const ProbeFacts& p, const Thresholds& th);

// The watch's report: `in` holds the samples (and any profiler-window traces); `probe`
// what the probe measured. With traces, Diagnose(in) decides the verdict; without, the
// probe's per-step timings do (as DiagnoseSteps); with neither, the verdict is kUnknown,
// never healthy. The probe rules' findings are added either way.
Result<Report> DiagnoseWatch(const DoctorInputs& in, const ProbeFacts& probe);

// One line for the live status, from the same verdict: "input_bound: too few workers ...".
std::string StatusLine(const Report& r);

}  // namespace stoker::doctor
