// Readers for GPU sample logs:
//   * `nvidia-smi --query-gpu=... --format=csv[,noheader?,nounits]` (any subset of fields,
//     with or without units; columns matched by base name through an alias table),
//   * `nvidia-smi dmon` (any -s selection, optional -o DT/T columns, repeated headers),
//   * `dcgmi dmon -e ...` (GRACT SMACT SMOCC TENSO DRAMA GPUTL ... short names),
//   * stoker watch's own sample log (nvidia-smi CSV plus stoker.* columns for the
//     process tree's CPU and disk I/O).
// Missing values ("[N/A]", "[Not Supported]", "-", "N/A") are NaN (throttle: -1).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace stoker::telemetry {

struct GpuSample {
  double t_s = 0;          // seconds since the first sample of the log
  int gpu = -1;            // GPU index; -1 when the log has none (host-only samples)
  double util = NAN;       // utilization.gpu, %: time a kernel was running (coarse)
  double mem_util = NAN;   // utilization.memory, %
  double mem_used_mib = NAN, mem_total_mib = NAN;
  double power_w = NAN, power_limit_w = NAN;
  double temp_c = NAN;
  double sm_clock_mhz = NAN, max_sm_clock_mhz = NAN;
  int64_t throttle = -1;   // clocks_throttle_reasons.active / clocks_event_reasons.active
  // DCGM profiling fields (0..1) and PCIe rates (MiB/s).
  double gr_active = NAN, sm_active = NAN, sm_occupancy = NAN, tensor_active = NAN,
         dram_active = NAN, pcie_tx_mib_s = NAN, pcie_rx_mib_s = NAN;
  // stoker watch: the watched process tree and the machine.
  double proc_cpu_cores = NAN;  // cores busy in the process tree
  double sys_cpu_pct = NAN;     // machine-wide CPU busy, %
  double cpus = NAN;            // cores available
  double read_mib_s = NAN, write_mib_s = NAN;  // process tree disk I/O
};

struct GpuLog {
  std::string path;
  std::string format;  // "nvidia-smi csv", "nvidia-smi dmon", "dcgmi dmon", "stoker watch"
  std::vector<GpuSample> samples;  // in file order
  std::vector<std::string> columns;  // as named in the file
  bool has_timestamps = false;
};

struct GpuLogOptions {
  double interval_s = 1.0;  // sample spacing for logs without timestamps (dmon, dcgmi)
};

// Detects the format from the first lines. Errors name the file and the line.
Result<GpuLog> ParseGpuLog(std::string_view text, const std::string& name,
                           const GpuLogOptions& opts = {});
Result<GpuLog> ReadGpuLog(Env* env, const std::string& path, const GpuLogOptions& opts = {});

// True when the text looks like one of the formats above (for sniffing).
bool LooksLikeGpuLog(std::string_view head);

// Parses "2024/09/08 13:03:31.000" (nvidia-smi), also "2024-09-08 13:03:31" and
// dmon's "20240908 13:03:31"; returns seconds since the epoch (UTC) or NaN.
double ParseSmiTimestamp(std::string_view s);

// Throttle reason bits (NVML nvmlClocksThrottleReasons / nvmlClocksEventReasons).
constexpr int64_t kThrottleGpuIdle = 0x1;
constexpr int64_t kThrottleSwPowerCap = 0x4;
constexpr int64_t kThrottleHwSlowdown = 0x8;
constexpr int64_t kThrottleSwThermal = 0x20;
constexpr int64_t kThrottleHwThermal = 0x40;
constexpr int64_t kThrottleHwPowerBrake = 0x80;
constexpr int64_t kThrottlePowerMask = kThrottleSwPowerCap | kThrottleHwPowerBrake;
constexpr int64_t kThrottleThermalMask = kThrottleHwSlowdown | kThrottleSwThermal |
                                         kThrottleHwThermal;
std::string ThrottleReasonNames(int64_t bits);

}  // namespace stoker::telemetry
