// Live samplers for `stoker watch`: NVML (libnvidia-ml.so.1 loaded at run time with
// dlopen, so stoker neither links against nor needs the driver) and /proc (CPU time and
// disk I/O of a process tree, machine-wide CPU). Samples are GpuSample rows, written as a
// CSV in nvidia-smi's --query-gpu format plus stoker.* columns, which ReadGpuLog reads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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
  uint64_t utime = 0, stime = 0;  // clock ticks
};
// Parses /proc/<pid>/stat ("pid (comm) S ppid ... utime stime ..."); comm may hold spaces
// and parentheses.
Result<ProcStat> ParseProcStat(std::string_view text);
// Parses /proc/<pid>/io; returns read_bytes and write_bytes (storage I/O).
Result<std::pair<uint64_t, uint64_t>> ParseProcIo(std::string_view text);
// Parses the first "cpu " line of /proc/stat: busy and total ticks.
Result<std::pair<uint64_t, uint64_t>> ParseCpuLine(std::string_view text);

// Samples the process tree rooted at `root` (CPU cores busy, disk MiB/s) and the machine's
// CPU, from /proc, as rates between calls. Reads through files under `proc_root`.
class ProcSampler {
 public:
  explicit ProcSampler(int root, std::string proc_root = "/proc");
  // Fills proc_cpu_cores, sys_cpu_pct, cpus, read_mib_s, write_mib_s of `s`.
  void Sample(double t_s, GpuSample* s);
  int tree_size() const { return tree_size_; }

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
};

// Writes samples as CSV (nvidia-smi --query-gpu header plus stoker.* columns).
std::string SamplesCsvHeader();
std::string SampleCsvRow(const GpuSample& s, double epoch_s);

}  // namespace stoker::telemetry
