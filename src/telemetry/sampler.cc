#include "telemetry/sampler.h"

#include <cstdint>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>

namespace stoker::telemetry {

// ---------------------------------------------------------------------------------------
// NVML (declared here: stoker does not need nvml.h to build).

namespace {
using nvmlDevice_t = void*;
struct NvmlUtilization {
  unsigned int gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlTemperatureGpu = 0;
}  // namespace

struct NvmlSampler::Api {
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  int (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  int (*util)(nvmlDevice_t, NvmlUtilization*) = nullptr;
  int (*mem)(nvmlDevice_t, NvmlMemory*) = nullptr;
  int (*power)(nvmlDevice_t, unsigned*) = nullptr;
  int (*power_limit)(nvmlDevice_t, unsigned*) = nullptr;
  int (*temp)(nvmlDevice_t, int, unsigned*) = nullptr;
  int (*clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  int (*max_clock)(nvmlDevice_t, int, unsigned*) = nullptr;
  int (*throttle)(nvmlDevice_t, unsigned long long*) = nullptr;
};

template <typename F>
static void Resolve(void* h, F* f, const char* name, const char* alt = nullptr) {
  void* p = dlsym(h, name);
  if (p == nullptr && alt != nullptr) p = dlsym(h, alt);
  *f = reinterpret_cast<F>(p);
}

Result<std::unique_ptr<NvmlSampler>> NvmlSampler::Open(const std::string& lib) {
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    return NotFound("NVML not available ({}): {}", lib, e ? e : "dlopen failed");
  }
  std::unique_ptr<NvmlSampler> s(new NvmlSampler());
  s->handle_ = h;
  s->api_ = std::make_unique<Api>();
  Api& a = *s->api_;
  Resolve(h, &a.init, "nvmlInit_v2", "nvmlInit");
  Resolve(h, &a.shutdown, "nvmlShutdown");
  Resolve(h, &a.error_string, "nvmlErrorString");
  Resolve(h, &a.count, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
  Resolve(h, &a.handle, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
  Resolve(h, &a.name, "nvmlDeviceGetName");
  Resolve(h, &a.util, "nvmlDeviceGetUtilizationRates");
  Resolve(h, &a.mem, "nvmlDeviceGetMemoryInfo");
  Resolve(h, &a.power, "nvmlDeviceGetPowerUsage");
  Resolve(h, &a.power_limit, "nvmlDeviceGetEnforcedPowerLimit");
  Resolve(h, &a.temp, "nvmlDeviceGetTemperature");
  Resolve(h, &a.clock, "nvmlDeviceGetClockInfo");
  Resolve(h, &a.max_clock, "nvmlDeviceGetMaxClockInfo");
  Resolve(h, &a.throttle, "nvmlDeviceGetCurrentClocksEventReasons",
          "nvmlDeviceGetCurrentClocksThrottleReasons");
  if (!a.init || !a.count || !a.handle) {
    return IOError("NVML ({}) lacks nvmlInit/nvmlDeviceGetCount", lib);
  }
  int rc = a.init();
  if (rc != 0) {
    std::string msg = a.error_string ? a.error_string(rc) : std::to_string(rc);
    s->api_->shutdown = nullptr;  // not initialized
    return IOError("nvmlInit failed: {} (no NVIDIA GPU or driver?)", msg);
  }
  unsigned n = 0;
  if (a.count(&n) != 0) n = 0;
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t d = nullptr;
    if (a.handle(i, &d) != 0) continue;
    s->devices_.push_back(d);
    char buf[96] = {0};
    if (a.name && a.name(d, buf, sizeof(buf)) == 0) {
      s->names_.emplace_back(buf);
    } else {
      s->names_.emplace_back("GPU");
    }
  }
  return s;
}

NvmlSampler::~NvmlSampler() {
  if (api_ && api_->shutdown) api_->shutdown();
  if (handle_) dlclose(handle_);
}

std::vector<GpuSample> NvmlSampler::Sample(double t_s) {
  std::vector<GpuSample> out;
  const Api& a = *api_;
  for (size_t i = 0; i < devices_.size(); ++i) {
    void* d = devices_[i];
    GpuSample s;
    s.t_s = t_s;
    s.gpu = static_cast<int>(i);
    NvmlUtilization u{};
    if (a.util && a.util(d, &u) == 0) s.util = u.gpu, s.mem_util = u.memory;
    NvmlMemory m{};
    if (a.mem && a.mem(d, &m) == 0) {
      s.mem_used_mib = static_cast<double>(m.used) / 1048576.0;
      s.mem_total_mib = static_cast<double>(m.total) / 1048576.0;
    }
    unsigned v = 0;
    if (a.power && a.power(d, &v) == 0) s.power_w = v / 1000.0;
    if (a.power_limit && a.power_limit(d, &v) == 0) s.power_limit_w = v / 1000.0;
    if (a.temp && a.temp(d, kNvmlTemperatureGpu, &v) == 0) s.temp_c = v;
    if (a.clock && a.clock(d, kNvmlClockSm, &v) == 0) s.sm_clock_mhz = v;
    if (a.max_clock && a.max_clock(d, kNvmlClockSm, &v) == 0) s.max_sm_clock_mhz = v;
    unsigned long long r = 0;
    if (a.throttle && a.throttle(d, &r) == 0) s.throttle = static_cast<int64_t>(r);
    out.push_back(s);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// /proc. These are kernel pseudo-files (size 0 in stat), read with plain read(2) rather
// than through Env, whose files are sized by fstat.

namespace {

bool ReadSmallFile(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > (1 << 20)) break;
  }
  ::close(fd);
  return true;
}

}  // namespace

Result<ProcStat> ParseProcStat(std::string_view text) {
  ProcStat p;
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  if (open == text.npos || close == text.npos || close < open) {
    return Corrupt("/proc stat: no '(comm)'");
  }
  p.pid = std::atoi(std::string(text.substr(0, open)).c_str());
  std::string rest(text.substr(close + 1));
  // Fields after comm: state(3) ppid(4) pgrp session tty tpgid flags minflt cminflt majflt
  // cmajflt utime(14) stime(15).
  char state = 0;
  long long ppid = 0;
  unsigned long long f[11] = {0};
  int n = std::sscanf(rest.c_str(), " %c %lld %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
                      &state, &ppid, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7],
                      &f[8], &f[9], &f[10]);
  if (n < 13) return Corrupt("/proc stat: {} fields", n);
  p.ppid = static_cast<int>(ppid);
  p.state = state;
  p.minflt = f[5];
  p.majflt = f[7];
  p.utime = f[9];
  p.stime = f[10];
  return p;
}

Result<std::pair<uint64_t, uint64_t>> ParseProcIo(std::string_view text) {
  uint64_t rd = 0, wr = 0;
  bool got_r = false, got_w = false;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find('\n', i);
    if (j == text.npos) j = text.size();
    std::string line(text.substr(i, j - i));
    unsigned long long v = 0;
    if (std::sscanf(line.c_str(), "read_bytes: %llu", &v) == 1) rd = v, got_r = true;
    if (std::sscanf(line.c_str(), "write_bytes: %llu", &v) == 1) wr = v, got_w = true;
    i = j + 1;
  }
  if (!got_r || !got_w) return Corrupt("/proc io: no read_bytes/write_bytes");
  return std::pair<uint64_t, uint64_t>{rd, wr};
}

Result<std::pair<uint64_t, uint64_t>> ParseCpuLine(std::string_view text) {
  std::string s(text.substr(0, text.find('\n')));
  unsigned long long v[8] = {0};
  int n = std::sscanf(s.c_str(), "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                      &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
  if (n < 4) return Corrupt("/proc/stat: no cpu line");
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) total += v[i];
  uint64_t idle = v[3] + (n > 4 ? v[4] : 0);  // idle + iowait
  return std::pair<uint64_t, uint64_t>{total - idle, total};
}

std::vector<CpuTicks> ParseCpuLines(std::string_view text) {
  std::vector<CpuTicks> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find('\n', i);
    if (j == text.npos) j = text.size();
    std::string_view line = text.substr(i, j - i);
    i = j + 1;
    if (line.substr(0, 3) != "cpu") continue;
    std::string s(line);
    size_t sp = s.find(' ');
    if (sp == s.npos) continue;
    unsigned long long v[8] = {0};
    int n = std::sscanf(s.c_str() + sp, " %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                        &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    if (n < 4) continue;
    CpuTicks t;
    for (int k = 0; k < n; ++k) t.total += v[k];
    t.iowait = n > 4 ? v[4] : 0;
    t.busy = t.total - v[3] - t.iowait;
    out.push_back(t);
  }
  return out;
}

Result<std::pair<uint64_t, uint64_t>> ParseSchedstat(std::string_view text) {
  std::string s(text.substr(0, 256));
  unsigned long long run = 0, wait = 0;
  if (std::sscanf(s.c_str(), "%llu %llu", &run, &wait) != 2) return Corrupt("schedstat: 2 numbers");
  return std::pair<uint64_t, uint64_t>{run, wait};
}

void ProcSampler::ResetAttribution() {
  acc_.clear();
  cpu_first_.clear();
  first_t_ = -1;
  first_read_set_ = false;
}

void ProcSampler::SetRoles(std::vector<int> main, std::vector<int> workers) {
  main_pids_ = std::set<int>(main.begin(), main.end());
  worker_pids_ = std::set<int>(workers.begin(), workers.end());
}

int ProcSampler::RoleOf(int pid) const {
  if (main_pids_.count(pid)) return 0;
  if (worker_pids_.count(pid)) return 1;
  return 2;
}

CpuAttribution ProcSampler::Attribution() const {
  CpuAttribution a;
  a.duration_s = first_t_ >= 0 && last_t_ > first_t_ ? last_t_ - first_t_ : 0;
  long ncpu = ::sysconf(_SC_NPROCESSORS_ONLN);
  a.cpus = ncpu > 0 ? static_cast<double>(ncpu) : NAN;
  if (a.duration_s <= 0) return a;
  double dt = a.duration_s;
  double tree_cpu = 0, tree_demand = 0;
  bool demand_ok = true;
  RoleCpu* out[3] = {&a.main, &a.workers, &a.other};
  PidAcc roles[3];
  for (const auto& [pid, p] : acc_) {
    PidAcc& r = roles[RoleOf(pid)];
    ++out[RoleOf(pid)]->procs;
    if (p.first_t >= 0 && (r.first_t < 0 || p.first_t < r.first_t)) r.first_t = p.first_t;
    r.last_t = std::max(r.last_t, p.last_t);
    r.cpu_ticks += p.cpu_ticks;
    r.demand_ns += p.demand_ns;
    r.demand_ok = r.demand_ok && p.demand_ok;
    r.state_samples += p.state_samples;
    r.running += p.running;
    r.disk_wait += p.disk_wait;
    r.minflt += p.minflt;
    r.majflt += p.majflt;
  }
  for (int r = 0; r < 3; ++r) {
    const PidAcc& acc = roles[r];
    RoleCpu& o = *out[r];
    if (o.procs == 0) continue;
    // The role's span; a role seen in one sample only (or before the period) gets the period.
    double span = acc.first_t >= 0 && acc.last_t > acc.first_t ? acc.last_t - acc.first_t : dt;
    span = std::min(span, dt);
    o.active_s = span;
    o.cores = acc.cpu_ticks / ticks_per_s_ / span;
    if (acc.demand_ok) o.demand = acc.demand_ns / 1e9 / span;
    if (acc.state_samples > 0) {
      o.running_frac = static_cast<double>(acc.running) / static_cast<double>(acc.state_samples);
      o.disk_wait_frac =
          static_cast<double>(acc.disk_wait) / static_cast<double>(acc.state_samples);
    }
    o.minflt_per_s = acc.minflt / span;
    o.majflt_per_s = acc.majflt / span;
    // The tree's totals stay over the whole period (roles may be active at different times).
    tree_cpu += acc.cpu_ticks / ticks_per_s_ / dt;
    if (acc.demand_ok) tree_demand += acc.demand_ns / 1e9 / dt; else demand_ok = false;
  }
  a.tree_cores = tree_cpu;
  if (demand_ok) a.tree_demand = tree_demand;
  if (!cpu_first_.empty() && cpu_last_.size() == cpu_first_.size()) {
    const CpuTicks &f = cpu_first_[0], &l = cpu_last_[0];
    if (l.total > f.total) {
      double tot = static_cast<double>(l.total - f.total);
      a.iowait_frac = static_cast<double>(l.iowait - f.iowait) / tot;
      size_t cores = cpu_first_.size() - 1;
      a.machine_busy_cores = static_cast<double>(l.busy - f.busy) / tot * static_cast<double>(
                                 cores > 0 ? cores : 1);
    }
    a.saturated_cores = 0;
    double best = 0;
    for (size_t k = 1; k < cpu_first_.size(); ++k) {
      const CpuTicks &cf = cpu_first_[k], &cl = cpu_last_[k];
      if (cl.total <= cf.total) continue;
      double b = static_cast<double>(cl.busy - cf.busy) / static_cast<double>(cl.total - cf.total);
      best = std::max(best, b);
      if (b >= 0.9) ++a.saturated_cores;
    }
    a.busiest_core_frac = best;
  }
  if (first_read_set_) {
    uint64_t rd = dead_read_;
    for (const auto& [pid, v] : seen_) rd += v.second.first;
    a.read_mib_s = static_cast<double>(rd >= first_read_ ? rd - first_read_ : 0) / 1048576.0 / dt;
  }
  return a;
}

ProcSampler::ProcSampler(int root, std::string proc_root)
    : root_(root), proc_(std::move(proc_root)) {
  long t = ::sysconf(_SC_CLK_TCK);
  ticks_per_s_ = t > 0 ? static_cast<double>(t) : 100.0;
}

std::vector<int> ProcSampler::Tree() {
  std::map<int, std::vector<int>> children;
  DIR* d = ::opendir(proc_.c_str());
  if (d != nullptr) {
    std::string text;
    while (dirent* e = ::readdir(d)) {
      const char* n = e->d_name;
      if (n[0] < '0' || n[0] > '9') continue;
      if (!ReadSmallFile(proc_ + "/" + n + "/stat", &text)) continue;
      auto st = ParseProcStat(text);
      if (st.ok()) children[st->ppid].push_back(st->pid);
    }
    ::closedir(d);
  }
  std::vector<int> out = {root_};
  for (size_t i = 0; i < out.size() && out.size() < 100000; ++i) {
    auto it = children.find(out[i]);
    if (it == children.end()) continue;
    for (int c : it->second) out.push_back(c);
  }
  return out;
}

void ProcSampler::Sample(double t_s, GpuSample* s) {
  std::vector<int> tree = Tree();
  std::set<int> alive;
  std::string text;
  for (int pid : tree) {
    std::string base = proc_ + "/" + std::to_string(pid);
    if (!ReadSmallFile(base + "/stat", &text)) continue;
    auto st = ParseProcStat(text);
    if (!st.ok()) continue;
    uint64_t cpu = st->utime + st->stime;
    uint64_t rd = 0, wr = 0;
    if (ReadSmallFile(base + "/io", &text)) {
      auto io = ParseProcIo(text);
      if (io.ok()) rd = io->first, wr = io->second;
    }
    seen_[pid] = {cpu, {rd, wr}};
    alive.insert(pid);
    // Attribution: deltas since this pid's last sample go to its role now.
    PidLast now;
    now.cpu = cpu;
    now.minflt = st->minflt;
    now.majflt = st->majflt;
    if (ReadSmallFile(base + "/schedstat", &text)) {
      auto ss = ParseSchedstat(text);
      if (ss.ok()) now.run_ns = ss->first, now.wait_ns = ss->second, now.schedstat = true;
    }
    PidAcc& acc = acc_[pid];
    auto it = pid_last_.find(pid);
    // Its life in the period: from the previous sample when it was born since (its CPU
    // time from birth is counted below), else from this sample.
    if (acc.first_t < 0)
      acc.first_t = (it == pid_last_.end() && first_t_ >= 0 && last_t_ >= 0) ? last_t_ : t_s;
    acc.last_t = t_s;
    if (it != pid_last_.end()) {
      const PidLast& was = it->second;
      acc.cpu_ticks += static_cast<double>(now.cpu >= was.cpu ? now.cpu - was.cpu : 0);
      acc.minflt += static_cast<double>(now.minflt >= was.minflt ? now.minflt - was.minflt : 0);
      acc.majflt += static_cast<double>(now.majflt >= was.majflt ? now.majflt - was.majflt : 0);
      if (now.schedstat && was.schedstat) {
        uint64_t d = (now.run_ns + now.wait_ns);
        uint64_t p = (was.run_ns + was.wait_ns);
        acc.demand_ns += static_cast<double>(d >= p ? d - p : 0);
      } else {
        acc.demand_ok = false;
      }
    } else if (first_t_ >= 0) {
      // A process born since the last sample: its whole life is in this period.
      acc.cpu_ticks += static_cast<double>(now.cpu);
      acc.minflt += static_cast<double>(now.minflt);
      acc.majflt += static_cast<double>(now.majflt);
      if (now.schedstat) acc.demand_ns += static_cast<double>(now.run_ns + now.wait_ns);
    }
    ++acc.state_samples;
    if (st->state == 'R') ++acc.running;
    if (st->state == 'D') ++acc.disk_wait;
    pid_last_[pid] = now;
  }
  // Processes that left the tree keep their last totals (their time was spent).
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (!alive.count(it->first)) {
      dead_cpu_ += it->second.first;
      dead_read_ += it->second.second.first;
      dead_write_ += it->second.second.second;
      it = seen_.erase(it);
    } else {
      ++it;
    }
  }
  uint64_t cpu = dead_cpu_, rd = dead_read_, wr = dead_write_;
  for (const auto& [pid, v] : seen_) cpu += v.first, rd += v.second.first, wr += v.second.second;
  tree_size_ = static_cast<int>(alive.size());
  uint64_t busy = 0, total = 0;
  if (ReadSmallFile(proc_ + "/stat", &text)) {
    auto c = ParseCpuLine(text);
    if (c.ok()) busy = c->first, total = c->second;
    cpu_last_ = ParseCpuLines(text);
    if (cpu_first_.empty()) cpu_first_ = cpu_last_;
  }
  if (first_t_ < 0) first_t_ = t_s;
  if (!first_read_set_) first_read_ = rd, first_read_set_ = true;
  long ncpu = ::sysconf(_SC_NPROCESSORS_ONLN);
  s->cpus = ncpu > 0 ? static_cast<double>(ncpu) : NAN;
  if (last_t_ >= 0 && t_s > last_t_) {
    double dt = t_s - last_t_;
    s->proc_cpu_cores = static_cast<double>(cpu >= last_cpu_ticks_ ? cpu - last_cpu_ticks_ : 0) /
                        ticks_per_s_ / dt;
    s->read_mib_s = static_cast<double>(rd >= last_read_ ? rd - last_read_ : 0) / 1048576.0 / dt;
    s->write_mib_s = static_cast<double>(wr >= last_write_ ? wr - last_write_ : 0) / 1048576.0 / dt;
    if (total > last_total_) {
      s->sys_cpu_pct = 100.0 * static_cast<double>(busy - last_busy_) /
                       static_cast<double>(total - last_total_);
    }
  }
  last_t_ = t_s;
  last_cpu_ticks_ = cpu;
  last_read_ = rd;
  last_write_ = wr;
  last_busy_ = busy;
  last_total_ = total;
}

// ---------------------------------------------------------------------------------------

std::string SamplesCsvHeader() {
  return "timestamp, index, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
         "memory.total [MiB], power.draw [W], temperature.gpu, clocks.sm [MHz], "
         "clocks.max.sm [MHz], clocks_throttle_reasons.active, stoker.proc_cpu_cores, "
         "stoker.sys_cpu [%], stoker.cpus, stoker.read [MiB/s], stoker.write [MiB/s]\n";
}

std::string SampleCsvRow(const GpuSample& s, double epoch_s) {
  auto v = [](double x, const char* f = "{:.1f}") {
    return std::isnan(x) ? std::string("[N/A]") : fmt::format(fmt::runtime(f), x);
  };
  double t = epoch_s + s.t_s;
  time_t secs = static_cast<time_t>(std::floor(t));
  int ms = static_cast<int>(std::lround((t - std::floor(t)) * 1000)) % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[64];
  std::snprintf(ts, sizeof(ts), "%04d/%02d/%02d %02d:%02d:%02d.%03d", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return fmt::format("{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}\n", ts,
                     s.gpu >= 0 ? std::to_string(s.gpu) : std::string("[N/A]"), v(s.util, "{:.0f}"),
                     v(s.mem_util, "{:.0f}"), v(s.mem_used_mib, "{:.0f}"),
                     v(s.mem_total_mib, "{:.0f}"), v(s.power_w, "{:.2f}"), v(s.temp_c, "{:.0f}"),
                     v(s.sm_clock_mhz, "{:.0f}"), v(s.max_sm_clock_mhz, "{:.0f}"),
                     s.throttle >= 0 ? fmt::format("0x{:016x}", s.throttle) : std::string("[N/A]"),
                     v(s.proc_cpu_cores, "{:.2f}"), v(s.sys_cpu_pct, "{:.0f}"), v(s.cpus, "{:.0f}"),
                     v(s.read_mib_s, "{:.2f}"), v(s.write_mib_s, "{:.2f}"));
}

}  // namespace stoker::telemetry
