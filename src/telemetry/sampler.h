// Live samplers for `stoker watch`: NVML (libnvidia-ml.so.1 loaded at run time with
// dlopen, so stoker neither links against nor needs the driver) and /proc (CPU time and
// disk I/O of a process tree, machine-wide CPU). Samples are GpuSample rows, written as a
// CSV in nvidia-smi's --query-gpu format plus stoker.* columns, which ReadGpuLog reads.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "io/env.h"
#include "telemetry/gpu_log.h"

namespace stoker::telemetry {

// NVML through dlopen. Not thread-safe; one instance per process.
class NvmlSampler {
 public:
  // kNotFound when libnvidia-ml.so.1 is missing, kIOError when nvmlInit fails (no GPU or
  // driver); the message says which.
  static Result<std::unique_ptr<NvmlSampler>> Open(const std::string& lib = "libnvidia-ml.so.1");
  ~NvmlSampler();
  int device_count() const { return static_cast<int>(devices_.size()); }
  const std::string& device_name(int i) const { return names_[i]; }
  // One sample per GPU; fields the device does not support stay NaN.
  std::vector<GpuSample> Sample(double t_s);

  struct Api;  // resolved entry points

 private:
  NvmlSampler() = default;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  std::vector<void*> devices_;
  std::vector<std::string> names_;
};

// /proc parsing, split from the reading so tests can feed text.
struct ProcStat {
  int pid = 0, ppid = 0;
  char state = '?';               // R running or runnable, S sleeping, D disk wait, ...
  uint64_t minflt = 0, majflt = 0;
  uint64_t utime = 0, stime = 0;  // clock ticks
};
// Parses /proc/<pid>/stat ("pid (comm) S ppid ... utime stime ..."); comm may hold spaces
// and parentheses.
Result<ProcStat> ParseProcStat(std::string_view text);
// Parses /proc/<pid>/io; returns read_bytes and write_bytes (storage I/O).
Result<std::pair<uint64_t, uint64_t>> ParseProcIo(std::string_view text);
// Parses the first "cpu " line of /proc/stat: busy and total ticks.
Result<std::pair<uint64_t, uint64_t>> ParseCpuLine(std::string_view text);
// Every line of /proc/stat that starts with "cpu": total (index 0, the "cpu " line) and
// each core ("cpuN"), as busy, iowait and total ticks.
struct CpuTicks {
  uint64_t busy = 0, iowait = 0, total = 0;
};
std::vector<CpuTicks> ParseCpuLines(std::string_view text);
// Parses /proc/<pid>/schedstat: nanoseconds on a CPU and waiting on a run queue.
Result<std::pair<uint64_t, uint64_t>> ParseSchedstat(std::string_view text);

// Where the process tree's CPU went, over the whole sampling period (stoker watch's CPU
// attribution). A role is a set of processes: the training processes ("main", the ones
// the probe reports a DataLoader loop in), their DataLoader workers, and the rest of the
// tree. NaN where nothing was measured. Rates are over the role's active span (from the
// first sample any of its processes was alive in to the last), not the whole period, so
// DataLoader workers that start late or live one epoch each are not diluted by the time
// before them.
struct RoleCpu {
  int procs = 0;             // processes seen in the role
  double active_s = NAN;     // the role's active span the rates below are over
  double cores = NAN;        // CPU time / wall time (user + system, all threads)
  double demand = NAN;       // (on-CPU + waiting for a CPU) / wall time, from schedstat:
                             // the cores the role would use on an idle machine
  double running_frac = NAN; // samples in state R, per process
  double disk_wait_frac = NAN;  // samples in state D (uninterruptible: storage, page-in)
  double minflt_per_s = NAN, majflt_per_s = NAN;
};
struct CpuAttribution {
  double duration_s = 0;
  double cpus = NAN;
  RoleCpu main, workers, other;
  double tree_cores = NAN, tree_demand = NAN;
  double machine_busy_cores = NAN;  // every process on the machine
  double iowait_frac = NAN;         // machine-wide share of CPU time in iowait
  double busiest_core_frac = NAN;   // the busiest core's busy share
  int saturated_cores = -1;         // cores >= 90% busy over the period
  double read_mib_s = NAN;          // the tree's storage reads
};

// Samples the process tree rooted at `root` (CPU cores busy, disk MiB/s) and the machine's
// CPU, from /proc, as rates between calls. Reads through files under `proc_root`.
class ProcSampler {
 public:
  explicit ProcSampler(int root, std::string proc_root = "/proc");
  // Fills proc_cpu_cores, sys_cpu_pct, cpus, read_mib_s, write_mib_s of `s`.
  void Sample(double t_s, GpuSample* s);
  int tree_size() const { return tree_size_; }
  // Which pids are training processes and which DataLoader workers (others: "other").
  // Attribution counts from the next Sample on.
  void SetRoles(std::vector<int> main, std::vector<int> workers);
  // Totals since the first Sample, or since ResetAttribution (the watch calls it when the
  // training loop starts, so that start-up, imports included, does not count).
  CpuAttribution Attribution() const;
  void ResetAttribution();

 private:
  std::vector<int> Tree();
  int root_;
  std::string proc_;
  double ticks_per_s_;
  double last_t_ = -1;
  uint64_t last_cpu_ticks_ = 0, last_read_ = 0, last_write_ = 0;
  uint64_t last_busy_ = 0, last_total_ = 0;
  // Per-pid last totals, so exited children do not make rates negative.
  std::map<int, std::pair<uint64_t, std::pair<uint64_t, uint64_t>>> seen_;
  uint64_t dead_cpu_ = 0, dead_read_ = 0, dead_write_ = 0;
  int tree_size_ = 0;

  // Attribution: per-pid last counters, and per-role accumulated deltas.
  struct PidLast {
    uint64_t cpu = 0, run_ns = 0, wait_ns = 0, minflt = 0, majflt = 0;
    bool schedstat = false;
  };
  struct PidAcc {
    double first_t = -1, last_t = -1;  // its life inside the period (sample times)
    double cpu_ticks = 0, demand_ns = 0;
    bool demand_ok = true;
    uint64_t state_samples = 0, running = 0, disk_wait = 0;
    double minflt = 0, majflt = 0;
  };
  int RoleOf(int pid) const;
  std::map<int, PidLast> pid_last_;
  std::set<int> main_pids_, worker_pids_;
  std::map<int, PidAcc> acc_;  // per pid, grouped into roles by Attribution()
  std::vector<CpuTicks> cpu_first_, cpu_last_;
  double first_t_ = -1;
  uint64_t first_read_ = 0;
  bool first_read_set_ = false;
};

// Writes samples as CSV (nvidia-smi --query-gpu header plus stoker.* columns).
std::string SamplesCsvHeader();
std::string SampleCsvRow(const GpuSample& s, double epoch_s);

}  // namespace stoker::telemetry
