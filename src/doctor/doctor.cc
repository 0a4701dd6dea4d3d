#include "doctor/doctor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <regex>
#include <set>

namespace stoker::doctor {

using telemetry::Interval;
using telemetry::IntervalSet;
using telemetry::MeasureInWindows;
using telemetry::TraceSummary;

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kInputBound: return "input_bound";
    case Verdict::kComputeBound: return "compute_bound";
    case Verdict::kCommunicationBound: return "communication_bound";
    case Verdict::kImbalance: return "imbalance";
    case Verdict::kHostBound: return "host_bound";
    case Verdict::kThrottled: return "throttled";
    case Verdict::kHealthy: return "healthy";
    case Verdict::kUnknown: return "unknown";
  }
  return "healthy";
}

double SpeedupFromRemoving(double step_s, double removed_s) {
  if (step_s <= 0 || removed_s <= 0) return 1.0;
  removed_s = std::min(removed_s, 0.95 * step_s);
  return step_s / (step_s - removed_s);
}

namespace {

constexpr double kNs = 1e-9;

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(v.size() - 1, lo + 1);
  double f = pos - static_cast<double>(lo);
  return v[lo] * (1 - f) + v[hi] * f;
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

IntervalSet FromWindows(const std::vector<Interval>& w) { return IntervalSet::FromSorted(w); }

// Idle gaps that start when a host synchronization returns: the sync drained the GPU's
// queue, and the GPU stays idle until the host launches again.
IntervalSet GapsAfterSync(const IntervalSet& idle, const IntervalSet& sync) {
  std::vector<Interval> out;
  const auto& s = sync.intervals();
  constexpr int64_t kSlack = 50'000;  // 50 µs: the sync returns just after the GPU drains
  for (const auto& g : idle.intervals()) {
    // A sync whose end lies in [g.begin - slack, g.end].
    auto it = std::lower_bound(s.begin(), s.end(), g.begin - kSlack,
                               [](const Interval& iv, int64_t t) { return iv.end < t; });
    if (it != s.end() && it->end <= g.end) out.push_back(g);
  }
  return IntervalSet::FromSorted(std::move(out));
}

void AddScaled(Fractions* acc, const Fractions& f, double w) {
  acc->data_wait += f.data_wait * w;
  acc->compute += f.compute * w;
  acc->comm += f.comm * w;
  acc->comm_total += f.comm_total * w;
  acc->comm_overlap += f.comm_overlap * w;
  acc->h2d += f.h2d * w;
  acc->h2d_pageable += f.h2d_pageable * w;
  acc->other_gpu += f.other_gpu * w;
  acc->idle += f.idle * w;
  acc->idle_data += f.idle_data * w;
  acc->idle_copy += f.idle_copy * w;
  acc->idle_sync += f.idle_sync * w;
  acc->idle_host += f.idle_host * w;
  acc->idle_optimizer += f.idle_optimizer * w;
  acc->sync += f.sync * w;
  acc->optimizer += f.optimizer * w;
}

struct Measures {  // ns per window
  std::vector<int64_t> data, compute, comm, comm_total, comm_overlap, h2d, h2d_pageable,
      other, idle, idle_data, idle_sync, idle_host, sync, opt;
};

std::vector<TimelineSeg> Coalesce(const IntervalSet& s, int lane, const std::string& kind,
                                  int64_t lo, int64_t hi, int64_t origin) {
  std::vector<TimelineSeg> out;
  int64_t min_gap = std::max<int64_t>(1, (hi - lo) / 1500);
  for (const auto& iv : s.intervals()) {
    if (iv.end <= lo || iv.begin >= hi) continue;
    int64_t b = std::max(iv.begin, lo), e = std::min(iv.end, hi);
    double bs = static_cast<double>(b - origin) * kNs, es = static_cast<double>(e - origin) * kNs;
    if (!out.empty() && static_cast<int64_t>((bs - out.back().end_s) / kNs) < min_gap) {
      out.back().end_s = es;
    } else {
      out.push_back({lane, kind, bs, es});
    }
    if (out.size() > 3000) break;
  }
  return out;
}

}  // namespace

RankReport AnalyzeTrace(const TraceSummary& t, const DoctorOptions& opts) {
  RankReport r;
  r.rank = t.rank;
  r.path = t.path;
  r.format = t.format;
  r.sync_calls = t.sync_calls;
  r.d2h_copy_calls = t.d2h_call_count;
  r.launches = t.launches;
  r.peak_mem_bytes = t.peak_mem_bytes;
  if (t.dataloader_iter.find("SingleProcess") != std::string::npos) {
    r.dataloader = "single-process";
  } else if (t.dataloader_iter.find("MultiProcessing") != std::string::npos) {
    r.dataloader = "multi-process";
  } else if (!t.dataloader_iter.empty()) {
    r.dataloader = t.dataloader_iter;
  }

  // Active GPUs.
  std::vector<const telemetry::GpuActivity*> gpus;
  for (const auto& g : t.gpus) {
    if (g.has_activity()) gpus.push_back(&g);
  }
  r.gpu = !gpus.empty();
  IntervalSet gpu_any;
  std::vector<IntervalSet> busy(gpus.size());
  for (size_t i = 0; i < gpus.size(); ++i) {
    const auto* g = gpus[i];
    busy[i] = Union(Union(Union(g->compute, g->comm), Union(g->h2d_pageable, g->h2d_pinned)),
                    Union(g->d2h, g->other));
    gpu_any = Union(gpu_any, busy[i]);
  }

  // Step windows: the host ProfilerStep, clipped to the next step's start and extended to
  // the end of the GPU work still running when the host step ends (TensorBoard plugin
  // extends steps to the device side the same way); short host gaps between steps are
  // folded into the step before.
  std::vector<Interval> win;
  std::vector<int64_t> numbers;
  const auto& st = t.steps;
  for (size_t i = 0; i < st.size(); ++i) {
    int64_t b = st[i].begin, e = st[i].end;
    int64_t next = i + 1 < st.size() ? st[i + 1].begin : INT64_MAX;
    if (!win.empty() && b < win.back().end) b = win.back().end;
    if (e > next) e = next;
    if (r.gpu) {
      const auto& v = gpu_any.intervals();
      auto it = std::lower_bound(v.begin(), v.end(), e,
                                 [](const Interval& iv, int64_t x) { return iv.end <= x; });
      if (it != v.end() && it->begin <= e) e = std::min(std::max(e, it->end), next);
    }
    if (next != INT64_MAX && next > e && (next - e) < (e - b) / 10) e = next;
    if (e <= b) continue;
    win.push_back({b, e});
    numbers.push_back(st[i].number);
  }
  IntervalSet wset = FromWindows(win);
  size_t n = win.size();
  r.steps = static_cast<int>(n);
  if (n == 0) return r;

  Measures m;
  m.data = MeasureInWindows(t.data_wait, win);
  m.sync = MeasureInWindows(t.sync, win);
  m.opt = MeasureInWindows(t.optimizer, win);
  auto zeros = std::vector<int64_t>(n, 0);
  // Per-device measures, averaged over devices.
  std::vector<Fractions> per_step(n);
  std::vector<double> T(n);
  for (size_t w = 0; w < n; ++w) T[w] = static_cast<double>(win[w].length());

  auto frac = [&](const std::vector<int64_t>& v, size_t w) {
    return T[w] > 0 ? static_cast<double>(v[w]) / T[w] : 0.0;
  };

  if (r.gpu) {
    IntervalSet sync_like = Union(t.sync, t.d2h_calls);
    for (size_t gi = 0; gi < gpus.size(); ++gi) {
      const auto* g = gpus[gi];
      IntervalSet C = g->compute;
      IntervalSet M = g->comm;
      IntervalSet H = Union(g->h2d_pageable, g->h2d_pinned);
      IntervalSet O = Union(g->d2h, g->other);
      IntervalSet CM = Union(C, M);
      IntervalSet Mx = Subtract(M, C);
      IntervalSet MC = Intersect(M, C);
      IntervalSet Hx = Subtract(H, CM);
      IntervalSet Hpx = Subtract(g->h2d_pageable, CM);
      IntervalSet Ox = Subtract(O, Union(CM, H));
      // GPU idle, attributed in priority order: the host waits for the DataLoader; the
      // host is blocked in a copy call (a staged copy from pageable memory); the gap
      // begins when a synchronization returns; otherwise the host is late launching.
      IntervalSet I = Subtract(wset, busy[gi]);
      IntervalSet Id = Intersect(I, t.data_wait);
      IntervalSet Irest = Subtract(I, t.data_wait);
      IntervalSet Ic = Intersect(Irest, t.h2d_calls);
      Irest = Subtract(Irest, t.h2d_calls);
      // A blocking read-back (a DtoH copy: .item(), .cpu()) is a synchronization: the GPU
      // idle while the host waits in it, and the gap after it returns, count as sync.
      IntervalSet Ib = Intersect(Irest, t.d2h_calls);
      Irest = Subtract(Irest, t.d2h_calls);
      IntervalSet Is = Union(Ib, GapsAfterSync(Irest, sync_like));
      IntervalSet Ih = Subtract(Irest, Is);
      IntervalSet Io = Intersect(Ih, t.optimizer);
      auto c = MeasureInWindows(C, win), mx = MeasureInWindows(Mx, win),
           mt = MeasureInWindows(M, win), mc = MeasureInWindows(MC, win),
           hx = MeasureInWindows(Hx, win), hpx = MeasureInWindows(Hpx, win),
           ox = MeasureInWindows(Ox, win), id = MeasureInWindows(Id, win),
           ic = MeasureInWindows(Ic, win), is = MeasureInWindows(Is, win),
           ih = MeasureInWindows(Ih, win), io = MeasureInWindows(Io, win),
           ii = MeasureInWindows(I, win);
      GpuRow row;
      row.device = g->device;
      for (const auto& d : t.devices) {
        if (d.id == g->device) {
          row.name = d.name;
          r.total_mem_bytes = std::max(r.total_mem_bytes, d.total_mem);
          if (d.compute_major >= 7) r.tc_capable = true;
        }
      }
      row.kernels = g->kernels;
      row.comm_kernels = g->comm_kernels;
      uint64_t ck = g->kernels - g->comm_kernels;
      row.mean_kernel_us = ck > 0 ? static_cast<double>(g->kernel_ns) / ck / 1000.0 : 0;
      row.h2d_pageable = g->h2d_pageable_count;
      row.h2d_pinned = g->h2d_pinned_count;
      row.h2d_pageable_bytes = g->h2d_pageable_bytes;
      double tot = 0;
      for (size_t w = 0; w < n; ++w) {
        Fractions f;
        f.compute = frac(c, w);
        f.comm = frac(mx, w);
        f.comm_total = frac(mt, w);
        f.comm_overlap = mt[w] > 0 ? static_cast<double>(mc[w]) / mt[w] : 0;
        f.h2d = frac(hx, w);
        f.h2d_pageable = frac(hpx, w);
        f.other_gpu = frac(ox, w);
        f.idle = frac(ii, w);
        f.idle_data = frac(id, w);
        f.idle_copy = frac(ic, w);
        f.idle_sync = frac(is, w);
        f.idle_host = frac(ih, w);
        f.idle_optimizer = frac(io, w);
        AddScaled(&per_step[w], f, 1.0 / static_cast<double>(gpus.size()));
        AddScaled(&row.f, f, T[w]);
        tot += T[w];
      }
      Fractions norm;
      AddScaled(&norm, row.f, 1.0 / tot);
      // comm_overlap is a share of communication, not of the step: recompute it.
      int64_t mts = std::accumulate(mt.begin(), mt.end(), int64_t{0});
      int64_t mcs = std::accumulate(mc.begin(), mc.end(), int64_t{0});
      norm.comm_overlap = mts > 0 ? static_cast<double>(mcs) / mts : 0;
      row.f = norm;
      r.gpus.push_back(row);
    }
    for (size_t w = 0; w < n; ++w) {
      per_step[w].data_wait = frac(m.data, w);
      per_step[w].sync = frac(m.sync, w);
      per_step[w].optimizer = frac(m.opt, w);
    }
    uint64_t k = 0;
    for (const auto* g : gpus) k += g->kernels;
    r.kernels_per_step = static_cast<double>(k) / static_cast<double>(n);
    r.tensor_cores_used = t.tc_kernel_ns > 0;
    r.tc_eligible = t.gemm_kernel_ns > 0;
  } else {
    // CPU-only: the main thread's operators are the compute; collectives that run while
    // the main thread is in no operator are exposed communication; the rest of the step
    // (outside any operator) is host overhead (Python, the profiler, sleeps).
    const telemetry::HostThread* main = t.FindThread(t.main_thread);
    if (main == nullptr) {
      int64_t best = -1;
      for (const auto& th : t.threads) {
        int64_t tot = th.ops.Total();
        if (tot > best) best = tot, main = &th;
      }
    }
    IntervalSet ops = main ? main->ops : IntervalSet();
    IntervalSet compute = Subtract(Subtract(ops, t.data_wait), t.optimizer);
    IntervalSet opt = Subtract(t.optimizer, t.data_wait);
    IntervalSet comm = Subtract(Subtract(t.host_comm, t.data_wait), ops);
    IntervalSet busy_host = Union(Union(ops, t.data_wait), comm);
    IntervalSet idle = Subtract(wset, busy_host);
    auto c = MeasureInWindows(compute, win), o = MeasureInWindows(opt, win),
         cm = MeasureInWindows(comm, win), ct = MeasureInWindows(t.host_comm, win),
         ii = MeasureInWindows(idle, win);
    for (size_t w = 0; w < n; ++w) {
      Fractions& f = per_step[w];
      f.data_wait = frac(m.data, w);
      f.compute = frac(c, w);
      f.optimizer = frac(o, w);
      f.comm = frac(cm, w);
      f.comm_total = frac(ct, w);
      f.comm_overlap = ct[w] > 0 ? 1.0 - static_cast<double>(cm[w]) / ct[w] : 0;
      f.idle = frac(ii, w);
      f.idle_host = f.idle;
    }
  }

  // Step rows and totals.
  double total = 0;
  std::vector<double> durs;
  for (size_t w = 0; w < n; ++w) {
    StepRow row;
    row.number = numbers[w];
    row.start_s = static_cast<double>(win[w].begin - win[0].begin) * kNs;
    row.dur_s = T[w] * kNs;
    row.f = per_step[w];
    r.step_rows.push_back(row);
    AddScaled(&r.f, per_step[w], T[w]);
    total += T[w];
    durs.push_back(row.dur_s);
  }
  Fractions norm;
  AddScaled(&norm, r.f, 1.0 / total);
  // Overlap as a share of communication time.
  double comm_t = 0, overlap_t = 0;
  for (size_t w = 0; w < n; ++w) {
    comm_t += per_step[w].comm_total * T[w];
    overlap_t += per_step[w].comm_overlap * per_step[w].comm_total * T[w];
  }
  norm.comm_overlap = comm_t > 0 ? overlap_t / comm_t : 0;
  r.f = norm;
  r.step_s_mean = total * kNs / static_cast<double>(n);
  r.step_s_p50 = Percentile(durs, 0.5);
  r.step_s_p90 = Percentile(durs, 0.9);
  r.steps_per_s = r.step_s_mean > 0 ? 1.0 / r.step_s_mean : 0;
  if (opts.batch_size > 0) r.samples_per_s = r.steps_per_s * opts.batch_size;
  for (const auto& g : t.gpus) {
    (void)g;
  }
  if (t.uses_dataparallel && gpus.size() > 1) r.dataparallel_multi_gpu = true;

  // Timeline of the first (up to) three steps.
  size_t last = std::min<size_t>(n, 3) - 1;
  int64_t lo = win[0].begin, hi = win[last].end;
  int lane = 0;
  auto add_lane = [&](const std::string& name, const IntervalSet& s, const std::string& kind) {
    auto segs = Coalesce(s, lane, kind, lo, hi, lo);
    r.timeline_lanes.push_back(name);
    r.timeline.insert(r.timeline.end(), segs.begin(), segs.end());
    ++lane;
  };
  add_lane("host: DataLoader wait", t.data_wait, "data");
  if (r.gpu) {
    add_lane("host: synchronize", t.sync, "sync");
    if (!t.memcpy_calls.empty()) add_lane("host: cudaMemcpy calls", t.memcpy_calls, "copy");
    if (!t.optimizer.empty()) add_lane("host: optimizer", t.optimizer, "optimizer");
    for (const auto* g : gpus) {
      std::string d = "GPU " + std::to_string(g->device);
      add_lane(d + " compute", g->compute, "compute");
      if (g->comm_kernels > 0) add_lane(d + " communication", g->comm, "comm");
      add_lane(d + " copies", Union(Union(g->h2d_pageable, g->h2d_pinned), Union(g->d2h, g->other)),
               "h2d");
    }
  } else {
    const telemetry::HostThread* main = t.FindThread(t.main_thread);
    if (main) add_lane("host: operators", main->ops, "cpu");
    add_lane("host: optimizer", t.optimizer, "optimizer");
    if (!t.host_comm.empty()) add_lane("host: collectives", t.host_comm, "comm");
  }
  return r;
}

GpuLogReport AnalyzeGpuLog(const telemetry::GpuLog& log, const Thresholds& th) {
  GpuLogReport r;
  r.path = log.path;
  r.format = log.format;
  r.samples = log.samples.size();
  std::map<int, std::vector<const telemetry::GpuSample*>> by_gpu;
  for (const auto& s : log.samples) by_gpu[s.gpu].push_back(&s);
  double util_sum = 0, busy = 0, util_n = 0, pw_sum = 0, pw_n = 0, sm_sum = 0, sm_n = 0,
         tc_sum = 0, tc_n = 0, thr_busy = 0, thr_n = 0, cpu_sum = 0, cpu_n = 0, rd_sum = 0,
         rd_n = 0, thr_clk_sum = 0, thr_clk_n = 0;
  for (auto& [gpu, v] : by_gpu) {
    if (gpu >= 0) r.gpus++;
    GpuLogSeries ser;
    ser.gpu = gpu;
    size_t stride = std::max<size_t>(1, v.size() / 600);
    double run_start = NAN, prev_t = NAN;
    int run_samples = 0;
    double gpu_starved = 0;
    bool have_util = false;
    // A starvation period: at least two consecutive samples below low_util (one sample is
    // within the sampling noise of utilization.gpu) lasting at least starvation_gap_s.
    auto close_run = [&](double end_t) {
      double len = end_t - run_start;
      if (run_samples >= 2 && len >= th.starvation_gap_s) {
        r.starvation_periods++;
        r.starvation_s += len;
        gpu_starved += len;
        r.longest_starvation_s = std::max(r.longest_starvation_s, len);
      }
      run_start = NAN;
      run_samples = 0;
    };
    for (size_t i = 0; i < v.size(); ++i) {
      const auto& s = *v[i];
      r.duration_s = std::max(r.duration_s, s.t_s);
      if (!std::isnan(s.util)) {
        have_util = true;
        util_sum += s.util;
        util_n++;
        bool is_busy = s.util >= th.busy_util_pct;
        if (is_busy) busy++;
        bool low = s.util < th.low_util * 100;
        if (low) {
          if (std::isnan(run_start)) run_start = s.t_s;
          run_samples++;
        } else if (!std::isnan(run_start)) {
          close_run(s.t_s);
        }
        if (is_busy && s.throttle >= 0) {
          thr_n++;
          int64_t bad = s.throttle & (telemetry::kThrottlePowerMask | telemetry::kThrottleThermalMask);
          if (bad) {
            thr_busy++;
            r.throttle_bits_seen |= bad;
            if (!std::isnan(s.sm_clock_mhz)) thr_clk_sum += s.sm_clock_mhz, thr_clk_n++;
          }
        }
      }
      if (!std::isnan(s.max_sm_clock_mhz)) {
        r.max_sm_clock_mhz = std::isnan(r.max_sm_clock_mhz)
                                 ? s.max_sm_clock_mhz
                                 : std::max(r.max_sm_clock_mhz, s.max_sm_clock_mhz);
      }
      if (!std::isnan(s.power_limit_w)) r.power_limit_w = s.power_limit_w;
      if (!std::isnan(s.mem_used_mib) && !std::isnan(s.mem_total_mib) && s.mem_total_mib > 0) {
        double f = s.mem_used_mib / s.mem_total_mib;
        r.mem_used_max_frac = std::isnan(r.mem_used_max_frac) ? f : std::max(r.mem_used_max_frac, f);
      }
      if (!std::isnan(s.power_w)) {
        pw_sum += s.power_w, pw_n++;
        r.power_max_w = std::isnan(r.power_max_w) ? s.power_w : std::max(r.power_max_w, s.power_w);
      }
      if (!std::isnan(s.temp_c)) {
        r.temp_max_c = std::isnan(r.temp_max_c) ? s.temp_c : std::max(r.temp_max_c, s.temp_c);
      }
      if (!std::isnan(s.sm_active)) sm_sum += s.sm_active, sm_n++;
      if (!std::isnan(s.tensor_active)) tc_sum += s.tensor_active, tc_n++;
      if (!std::isnan(s.proc_cpu_cores)) cpu_sum += s.proc_cpu_cores, cpu_n++;
      if (!std::isnan(s.cpus)) r.cpus = s.cpus;
      if (!std::isnan(s.read_mib_s)) rd_sum += s.read_mib_s, rd_n++;
      if (i % stride == 0) {
        ser.t_s.push_back(s.t_s);
        ser.util.push_back(s.util);
        ser.mem_used_frac.push_back(
            (!std::isnan(s.mem_used_mib) && s.mem_total_mib > 0) ? s.mem_used_mib / s.mem_total_mib
                                                                 : NAN);
        ser.power_w.push_back(s.power_w);
        ser.temp_c.push_back(s.temp_c);
        ser.proc_cpu_cores.push_back(s.proc_cpu_cores);
        ser.read_mib_s.push_back(s.read_mib_s);
      }
      prev_t = s.t_s;
    }
    if (have_util && !std::isnan(run_start)) close_run(prev_t);
    if (gpu_starved > 0) {
      r.starvation_by_gpu.push_back({gpu, gpu_starved});
      double span = v.back()->t_s - v.front()->t_s;
      double frac = span > 0 ? std::min(1.0, gpu_starved / span) : 0;
      if (frac > r.starved_gpu_frac) r.starved_gpu_frac = frac, r.starved_gpu = gpu;
    }
    r.series.push_back(std::move(ser));
  }
  if (std::isnan(r.max_sm_clock_mhz)) {
    for (const auto& s : log.samples) {
      if (!std::isnan(s.sm_clock_mhz)) {
        r.max_sm_clock_mhz = std::isnan(r.max_sm_clock_mhz) ? s.sm_clock_mhz
                                                            : std::max(r.max_sm_clock_mhz, s.sm_clock_mhz);
      }
    }
  }
  if (thr_clk_n > 0) r.throttled_sm_clock_mhz = thr_clk_sum / thr_clk_n;
  if (util_n > 0) r.util_mean = util_sum / util_n, r.busy_frac = busy / util_n;
  if (pw_n > 0) r.power_mean_w = pw_sum / pw_n;
  if (sm_n > 0) r.sm_active_mean = sm_sum / sm_n;
  if (tc_n > 0) r.tensor_active_mean = tc_sum / tc_n;
  if (thr_n > 0) r.throttled_busy_frac = thr_busy / thr_n;
  if (cpu_n > 0) r.proc_cpu_cores_mean = cpu_sum / cpu_n;
  if (rd_n > 0) r.read_mib_s_mean = rd_sum / rd_n;
  return r;
}

PipelineReport AnalyzePipeline(const telemetry::PipelineMetrics& m, int cpus) {
  PipelineReport r;
  r.path = m.path;
  r.samples_per_s = m.samples_per_s;
  r.consumer_wait_frac = m.consumer_wait_frac;
  r.threads = m.threads;
  r.cpus = m.cpus > 0 ? m.cpus : cpus;
  r.stages = m.stages;
  r.bottleneck = m.bottleneck;
  if (r.bottleneck.empty()) {
    // The busiest stage (highest busy share, least waiting on its input).
    double best = -1;
    for (const auto& s : m.stages) {
      double score = s.busy_frac - s.wait_output_frac;
      if (score > best) best = score, r.bottleneck = s.name;
    }
  }
  std::string b = r.bottleneck;
  std::transform(b.begin(), b.end(), b.begin(), [](unsigned char c) { return std::tolower(c); });
  if (b.find("read") != std::string::npos || b.find("source") != std::string::npos ||
      b.find("storage") != std::string::npos || b.find("io") == 0) {
    r.bottleneck_kind = "storage";
  } else if (b.find("decode") != std::string::npos) {
    r.bottleneck_kind = "decode";
  } else if (b.find("aug") != std::string::npos || b.find("op") != std::string::npos ||
             b.find("transform") != std::string::npos) {
    r.bottleneck_kind = "ops";
  } else if (b.find("batch") != std::string::npos || b.find("collate") != std::string::npos ||
             b.find("prefetch") != std::string::npos) {
    r.bottleneck_kind = "batch";
  } else if (b.find("consumer") != std::string::npos) {
    r.bottleneck_kind = "consumer";
  } else {
    r.bottleneck_kind = b;
  }
  // Cores busy: the stages' thread CPU time over the wall time when recorded (a read
  // stage blocked on storage is busy but uses no core), else busy share x threads.
  double cpu_s = 0;
  bool have_cpu = m.wall_s > 0;
  for (const auto& s : m.stages) {
    if (s.cpu_s < 0) have_cpu = false;
    cpu_s += std::max(0.0, s.cpu_s);
  }
  if (have_cpu) {
    r.cores_busy = cpu_s / m.wall_s;
  } else {
    for (const auto& s : m.stages) r.cores_busy += s.busy_frac * std::max(1, s.threads);
  }
  int budget = r.cpus > 0 ? r.cpus : r.threads;
  r.cores_saturated = budget > 0 && r.cores_busy >= 0.9 * budget;
  return r;
}

namespace {

std::string Pct(double f) { return fmt::format("{:.0f}%", f * 100); }
std::string Pct1(double f) { return fmt::format("{:.1f}%", f * 100); }
std::string Ms(double s) {
  if (s >= 10) return fmt::format("{:.1f} s", s);
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 0.01) return fmt::format("{:.0f} ms", s * 1e3);
  return fmt::format("{:.1f} ms", s * 1e3);
}
std::string X(double v) { return fmt::format("{:.2f}x", v); }

int SeverityRank(const std::string& s) {
  if (s == "high") return 0;
  if (s == "medium") return 1;
  if (s == "low") return 2;
  return 3;
}

std::string DataLoaderFix(const std::string& loader, bool gpu, int cpus) {
  std::string workers = cpus > 0 ? fmt::format("up to about {} (the cores per GPU)", cpus)
                                 : "up to the number of cores per GPU (start with 4-8)";
  std::string pin = gpu ? " Add pin_memory=True and move batches with "
                          ".to(device, non_blocking=True) so the copy overlaps compute."
                        : "";
  if (loader == "single-process") {
    return fmt::format(
        "The DataLoader runs in the training process (num_workers=0): set num_workers {} so "
        "batches are prepared in parallel while the model trains, with "
        "persistent_workers=True (no re-fork each epoch) and prefetch_factor=2-4.{} If the "
        "workers are still too slow, make each sample cheaper: a faster format or storage "
        "(stoker convert, local cache), smaller stored images, or augmentation on the GPU.",
        workers, pin);
  }
  return fmt::format(
      "The DataLoader workers do not keep up. If cores are idle, raise num_workers ({}); "
      "raise prefetch_factor (batches in flight = prefetch_factor x num_workers) to absorb "
      "jitter; keep persistent_workers=True.{} If the cores are busy, make each sample "
      "cheaper: a faster format or storage (stoker convert, a local NVMe cache), decode at "
      "reduced size, or move augmentation to the GPU (DALI, torchvision.transforms.v2 on "
      "CUDA tensors); the stoker pipeline does this with a self-tuning thread budget.",
      workers, pin);
}

Finding InputFinding(double data_frac, double idle_data_frac, double step_s, int steps,
                     const std::string& loader, bool gpu, int cpus, const Thresholds& th,
                     int rank) {
  Finding f;
  f.id = "input.dataloader";
  f.rank = rank;
  double lost = gpu ? idle_data_frac : data_frac;
  f.severity = lost >= th.input_verdict ? "high" : (lost >= th.input_warn ? "medium" : "low");
  f.title = lost >= th.input_verdict ? "The training loop is input-bound: it waits for the DataLoader"
                                     : "Part of each step waits for the DataLoader";
  if (gpu) {
    f.evidence = fmt::format(
        "{} of the {} step ({} over {} steps) is spent in DataLoader.__next__; the GPU is idle "
        "for {} of the step while the host waits for data.",
        Pct(data_frac), Ms(step_s), Ms(data_frac * step_s) + " per step", steps,
        Pct(idle_data_frac));
  } else {
    f.evidence = fmt::format(
        "{} of the {} step ({} per step, over {} steps) is spent waiting in "
        "DataLoader.__next__.",
        Pct(data_frac), Ms(step_s), Ms(data_frac * step_s), steps);
  }
  f.fix = DataLoaderFix(loader, gpu, cpus);
  if (loader == "single-process" && data_frac < 1.0 && step_s > 0) {
    // num_workers=0: each batch is loaded in the wait; workers hide it when together they
    // make a batch per step of the rest of the loop.
    double load_s = data_frac * step_s, rest_s = (1.0 - data_frac) * step_s;
    int need = static_cast<int>(std::ceil(load_s / std::max(rest_s, 1e-6) - 1e-9));
    need = std::clamp(need, 1, 1024);
    f.fix += fmt::format(
        " Loading takes about {} per batch against {} for the rest of the step, so about {} "
        "worker{} (each on a free core) {} it fully{}.",
        Ms(load_s), Ms(rest_s), need, need == 1 ? "" : "s", need == 1 ? "hides" : "hide",
        cpus > 0 && need > cpus ? fmt::format("; with {} cores the loading, not the model, "
                                              "will still set the pace",
                                              cpus)
                                : "; add one or two for jitter");
    f.expected_speedup = SpeedupFromRemoving(step_s, lost * step_s);
    if (cpus > 0 && need > cpus) {
      // cpus workers make a batch every load_s / cpus at best: the step cannot get shorter.
      double floor_s = load_s / cpus;
      double new_step = std::max(step_s * (1.0 - lost), floor_s);
      f.expected_speedup = std::min(*f.expected_speedup, step_s / new_step);
      f.evidence += fmt::format(" With {} cores for workers the step can shrink to about {} "
                                "(loading-bound).",
                                cpus, Ms(new_step));
    }
    return f;
  }
  f.expected_speedup = SpeedupFromRemoving(step_s, lost * step_s);
  return f;
}

struct Candidate {
  Verdict v;
  double score, threshold;
  double norm() const { return threshold > 0 ? score / threshold : 0; }
};

}  // namespace

Result<Report> Diagnose(const DoctorInputs& in) {
  const Thresholds& th = in.options.thresholds;
  Report rep;
  rep.batch_size = in.options.batch_size;
  rep.notes = in.notes;
  if (in.traces.empty() && in.gpu_logs.empty() && in.pipelines.empty()) {
    return InvalidArgument("nothing to diagnose: give a trace, a GPU log or pipeline metrics");
  }
  for (const auto& t : in.traces) rep.inputs.push_back(t.path + " (trace, " + t.format + ")");
  for (const auto& l : in.gpu_logs) rep.inputs.push_back(l.path + " (" + l.format + ")");
  for (const auto& p : in.pipelines) rep.inputs.push_back(p.path + " (stoker pipeline metrics)");

  // Per-rank analyses.
  for (size_t i = 0; i < in.traces.size(); ++i) {
    RankReport r = AnalyzeTrace(in.traces[i], in.options);
    if (r.rank < 0) r.rank = static_cast<int>(i);
    rep.ranks.push_back(std::move(r));
  }
  std::sort(rep.ranks.begin(), rep.ranks.end(),
            [](const RankReport& a, const RankReport& b) { return a.rank < b.rank; });
  rep.has_trace = !rep.ranks.empty();
  for (const auto& l : in.gpu_logs) rep.gpu_logs.push_back(AnalyzeGpuLog(l, th));
  if (!in.pipelines.empty()) rep.pipeline = AnalyzePipeline(in.pipelines.back(), in.options.cpus);

  std::vector<Finding> F;
  std::vector<Candidate> cands;
  const Fractions* B = &rep.breakdown;

  if (rep.has_trace) {
    double n = static_cast<double>(rep.ranks.size());
    for (const auto& r : rep.ranks) {
      AddScaled(&rep.breakdown, r.f, 1.0 / n);
      rep.step_s += r.step_s_mean / n;
      rep.steps += r.steps;
      rep.gpu = rep.gpu || r.gpu;
    }
    // Sync training runs at the pace of the slowest rank.
    double slowest = 0;
    for (const auto& r : rep.ranks) slowest = std::max(slowest, r.step_s_mean);
    rep.steps_per_s = slowest > 0 ? 1.0 / slowest : 0;
    if (rep.batch_size > 0) rep.samples_per_s = rep.steps_per_s * rep.batch_size * n;

    // Cross-rank.
    CrossRank& x = rep.cross;
    x.ranks = static_cast<int>(rep.ranks.size());
    if (rep.ranks.size() >= 2) {
      std::vector<double> step, data, comm, work;
      for (const auto& r : rep.ranks) {
        step.push_back(r.step_s_mean);
        data.push_back(r.f.data_wait * r.step_s_mean);
        comm.push_back(r.f.comm * r.step_s_mean);
        work.push_back(r.step_s_mean * (1.0 - r.f.comm));
      }
      auto spread = [](const std::vector<double>& v) {
        auto [lo, hi] = std::minmax_element(v.begin(), v.end());
        return *hi - *lo;
      };
      x.step_spread_s = spread(step);
      x.data_wait_spread_s = spread(data);
      x.comm_spread_s = spread(comm);
      size_t s = static_cast<size_t>(std::max_element(work.begin(), work.end()) - work.begin());
      std::vector<double> others, od, oc, oh;
      for (size_t i = 0; i < work.size(); ++i) {
        if (i == s) continue;
        others.push_back(work[i]);
        const auto& r = rep.ranks[i];
        od.push_back(r.f.data_wait * r.step_s_mean);
        oc.push_back(r.f.compute * r.step_s_mean);
        oh.push_back((r.gpu ? r.f.idle_host + r.f.idle_sync : r.f.idle) * r.step_s_mean);
      }
      x.straggler_excess_s = work[s] - Median(others);
      const auto& sr = rep.ranks[s];
      double dd = sr.f.data_wait * sr.step_s_mean - Median(od);
      double dc = sr.f.compute * sr.step_s_mean - Median(oc);
      double dh = (sr.gpu ? sr.f.idle_host + sr.f.idle_sync : sr.f.idle) * sr.step_s_mean -
                  Median(oh);
      x.straggler_cause = dd >= dc && dd >= dh ? "data_wait" : (dc >= dh ? "compute" : "host");
      double imb = rep.step_s > 0 ? x.straggler_excess_s / rep.step_s : 0;
      if (imb >= th.imbalance_verdict / 2) x.straggler_rank = sr.rank;
      cands.push_back({Verdict::kImbalance, imb, th.imbalance_verdict});
      if (imb >= th.imbalance_verdict / 2) {
        Finding f;
        f.id = "imbalance.straggler";
        f.rank = sr.rank;
        f.severity = imb >= th.imbalance_verdict ? "high" : "medium";
        f.title = fmt::format("Rank {} is the straggler: the other ranks wait for it", sr.rank);
        std::string cause_txt =
            x.straggler_cause == "data_wait"
                ? fmt::format("its DataLoader wait is {} per step vs {} on the others",
                              Ms(sr.f.data_wait * sr.step_s_mean), Ms(Median(od)))
                : x.straggler_cause == "compute"
                      ? fmt::format("its compute is {} per step vs {} on the others",
                                    Ms(sr.f.compute * sr.step_s_mean), Ms(Median(oc)))
                      : "its host overhead (outside operators) is larger";
        f.evidence = fmt::format(
            "Rank {} works {} per step outside communication, {} more than the median of the "
            "other ranks ({} of the {} step); {}. The other ranks spend that time waiting in "
            "the collective (exposed communication spread {} per step).",
            sr.rank, Ms(work[s]), Ms(x.straggler_excess_s), Pct(imb), Ms(rep.step_s), cause_txt,
            Ms(x.comm_spread_s));
        f.fix = x.straggler_cause == "data_wait"
                    ? fmt::format("Look at rank {}'s input: its data is slower to load (a slower "
                                  "disk or network path, larger or uneven shards, fewer "
                                  "DataLoader workers or cores on that node). Give it the same "
                                  "num_workers/pin_memory settings, balance the shards, or cache "
                                  "its data locally.",
                                  sr.rank)
                    : fmt::format("Look at rank {}'s node: a slower or throttled GPU/CPU, other "
                                  "processes on it, or more work per step (uneven batch or "
                                  "sequence lengths). Compare its GPU log (nvidia-smi) with the "
                                  "others'.",
                                  sr.rank);
        f.expected_speedup = SpeedupFromRemoving(rep.step_s, x.straggler_excess_s);
        F.push_back(f);
      }
    }

    // Input.
    int cpus = in.options.cpus;
    const RankReport* worst_data = &rep.ranks[0];
    for (const auto& r : rep.ranks) {
      double a = r.gpu ? r.f.idle_data : r.f.data_wait;
      double b = worst_data->gpu ? worst_data->f.idle_data : worst_data->f.data_wait;
      if (a > b) worst_data = &r;
    }
    // TensorFlow's input time: waiting for input plus host-to-device transfer (exposed
    // copies on the GPU, and the GPU idle while the host is blocked in a staged copy).
    double input_score = rep.gpu ? B->idle_data + B->h2d + B->idle_copy : B->data_wait;
    cands.push_back({Verdict::kInputBound, input_score, th.input_verdict});
    if (B->data_wait >= th.input_warn || (rep.gpu && B->idle_data >= th.input_warn)) {
      Finding f = InputFinding(B->data_wait, B->idle_data, rep.step_s, rep.steps,
                               worst_data->dataloader, rep.gpu, cpus, th,
                               rep.ranks.size() > 1 ? -1 : worst_data->rank);
      F.push_back(f);
    }

    // Host-to-device copies.
    uint64_t pageable = 0, pinned = 0;
    int64_t pageable_bytes = 0;
    for (const auto& r : rep.ranks) {
      for (const auto& g : r.gpus) {
        pageable += g.h2d_pageable, pinned += g.h2d_pinned, pageable_bytes += g.h2d_pageable_bytes;
      }
    }
    if (pageable > 0) {
      // What pinning removes: pageable copies no kernel hides, and the GPU idle while the
      // host is blocked staging a copy.
      double lost = B->h2d_pageable + B->idle_copy;
      Finding f;
      f.id = "h2d.pageable";
      f.severity = lost >= th.input_warn ? "high" : (lost >= 0.01 ? "medium" : "low");
      f.title = "Host-to-device copies from pageable memory";
      f.evidence = fmt::format(
          "{} Memcpy HtoD (Pageable -> Device) ({:.1f} MB) against {} from pinned memory; "
          "copies not hidden behind kernels take {} of the step ({} from pageable memory), and "
          "the GPU is idle for {} of the step ({} per step) while the host is blocked in "
          "cudaMemcpy calls. A cudaMemcpyAsync from pageable memory is staged and synchronous "
          "for the host (Nsight Systems rule cuda_memcpy_async).",
          pageable, static_cast<double>(pageable_bytes) / 1e6, pinned, Pct1(B->h2d),
          Pct1(B->h2d_pageable), Pct1(B->idle_copy), Ms(B->idle_copy * rep.step_s));
      f.fix =
          "Set pin_memory=True on the DataLoader and copy with "
          "tensor.to(device, non_blocking=True); allocate other host tensors that go to the "
          "GPU each step with pin_memory=True.";
      f.expected_speedup = SpeedupFromRemoving(rep.step_s, lost * rep.step_s);
      F.push_back(f);
    } else if (B->h2d + B->idle_copy >= th.input_warn) {
      double lost = B->h2d + B->idle_copy;
      Finding f;
      f.id = "h2d.exposed";
      f.severity = lost >= th.input_verdict ? "high" : "medium";
      f.title = "Host-to-device copies are not overlapped with compute";
      f.evidence = fmt::format(
          "Copies to the GPU that no kernel overlaps take {} of the step, and the GPU is idle "
          "for {} of the step while the host is blocked in cudaMemcpy calls ({} per step in "
          "all).",
          Pct1(B->h2d), Pct1(B->idle_copy), Ms(lost * rep.step_s));
      f.fix = "Copy the next batch while the current one trains: non_blocking=True copies from "
              "pinned memory (pin_memory=True), issued early (a CUDA-stream prefetcher), or let "
              "the stoker pipeline's prefetch stage do the copy; replace synchronous "
              "cudaMemcpy/tensor.to(device) calls in the step with non_blocking ones.";
      f.expected_speedup = SpeedupFromRemoving(rep.step_s, lost * rep.step_s);
      F.push_back(f);
    }

    // Communication.
    // Exposed communication a rank would keep with balanced ranks: the least any rank has
    // (the TensorBoard plugin splits each collective the same way: the minimum across
    // ranks is the transfer, the rest is waiting for the others).
    double comm_transfer = B->comm;
    if (rep.ranks.size() >= 2 && rep.step_s > 0) {
      double lo = 1e300;
      for (const auto& r : rep.ranks) lo = std::min(lo, r.f.comm * r.step_s_mean);
      comm_transfer = std::min(B->comm, lo / rep.step_s);
    }
    double comm_score = comm_transfer;
    cands.push_back({Verdict::kCommunicationBound, comm_score, th.comm_verdict});
    if (comm_transfer >= th.comm_warn) {
      // The dominant kind of collective decides the advice.
      std::map<std::string, int64_t> kinds;
      for (const auto& t : in.traces) {
        for (const auto& [name, ns] : t.collectives) {
          std::string l = name;
          std::transform(l.begin(), l.end(), l.begin(),
                         [](unsigned char c) { return std::tolower(c); });
          std::string k = "all_reduce";
          if (l.find("all_to_all") != l.npos || l.find("alltoall") != l.npos ||
              l.find("sendrecv") != l.npos || l.find("send") != l.npos ||
              l.find("recv") != l.npos) {
            k = "all_to_all";
          } else if (l.find("gather") != l.npos || l.find("reduce_scatter") != l.npos ||
                     l.find("reducescatter") != l.npos) {
            k = "all_gather";
          } else if (l.find("broadcast") != l.npos) {
            k = "broadcast";
          }
          kinds[k] += ns;
        }
      }
      std::string kind = "all_reduce";
      int64_t best_ns = -1, all_ns = 0;
      for (const auto& [k, ns] : kinds) {
        all_ns += ns;
        if (ns > best_ns) best_ns = ns, kind = k;
      }
      Finding f;
      f.id = "comm.exposed";
      f.severity = comm_transfer >= th.comm_verdict ? "high" : "medium";
      f.title = "Communication is not hidden behind compute";
      f.evidence = fmt::format(
          "Collectives take {} of the step, {} of it overlapped by compute; {} of the step "
          "({} per step) is exposed communication",
          Pct(B->comm_total), Pct(B->comm_overlap), Pct(B->comm), Ms(B->comm * rep.step_s));
      if (best_ns > 0 && all_ns > 0) {
        f.evidence += fmt::format(", mostly {} ({} of collective time)", kind,
                                  Pct(static_cast<double>(best_ns) / static_cast<double>(all_ns)));
      }
      f.evidence += ".";
      if (B->comm - comm_transfer >= 0.01) {
        f.evidence += fmt::format(
            " The rank that waits least still has {} ({} per step) exposed; the rest is "
            "ranks waiting for slower ones{}.",
            Pct(comm_transfer), Ms(comm_transfer * rep.step_s),
            rep.cross.straggler_rank >= 0 ? " (see the straggler)" : "");
      }
      int world = 0;
      for (const auto& t : in.traces) world = std::max(world, t.world_size);
      if (world > static_cast<int>(rep.ranks.size())) {
        f.evidence += fmt::format(
            " Only {} of the job's {} ranks {} in the input: part of this may be waiting "
            "for ranks not shown; give every rank's trace to separate transfer from waiting.",
            rep.ranks.size(), world, rep.ranks.size() == 1 ? "is" : "are");
      }
      if (kind == "all_to_all") {
        f.fix = "All-to-all exchanges (embedding lookups or MoE tokens) are exposed: overlap "
                "them with compute (fetch the next batch's sparse features one step ahead, as "
                "TorchRec's TrainPipelineSparseDist does), send fewer bytes (bf16/fp16 or "
                "quantized communication, smaller embedding dimensions), and balance the "
                "features or tokens per rank.";
      } else if (kind == "all_gather") {
        f.fix = "Sharded-parameter gathers and gradient reduce-scatters (FSDP/ZeRO) are "
                "exposed: enable prefetching (FSDP backward_prefetch=BACKWARD_PRE, "
                "forward_prefetch=True), use larger wrap units or hybrid sharding inside a node, "
                "and a larger batch per GPU so that compute hides the traffic.";
      } else if (kind == "broadcast") {
        f.fix = "Broadcasts run every step: with DDP, broadcast_buffers=False unless the "
                "buffers (e.g. BatchNorm statistics) must be identical on all ranks each step; "
                "broadcast other state less often.";
      } else {
        f.fix = "Overlap and shrink gradient communication: with DDP tune bucket_cap_mb "
                "(larger buckets mean fewer, more efficient all-reduces; smaller ones start "
                "earlier), use gradient accumulation with no_sync() to all-reduce every k "
                "steps, a larger batch per GPU, or gradient compression (DDP comm hooks, "
                "bf16/fp16 compression).";
      }
      bool gloo_gpu = false;
      for (const auto& t : in.traces) {
        if (t.backend == "gloo" && t.has_gpu()) gloo_gpu = true;
      }
      if (gloo_gpu) f.fix += " The trace uses the gloo backend on GPUs: use nccl.";
      f.expected_speedup = SpeedupFromRemoving(rep.step_s, comm_transfer * rep.step_s);
      F.push_back(f);
    }

    // Host-side: syncs, launch/Python overhead.
    double host_score = rep.gpu ? B->idle_host + B->idle_sync : B->idle;
    cands.push_back({Verdict::kHostBound, host_score, th.host_verdict});
    if (rep.gpu && B->idle_sync >= th.host_warn) {
      uint64_t calls = 0, d2h = 0;
      for (const auto& r : rep.ranks) calls += r.sync_calls, d2h += r.d2h_copy_calls;
      Finding f;
      f.id = "host.sync";
      f.severity = B->idle_sync >= th.host_verdict ? "high" : "medium";
      f.title = "Host synchronizations drain the GPU";
      f.evidence = fmt::format(
          "{} cudaStreamSynchronize/cudaDeviceSynchronize calls take {} of host time, and {} "
          "copies to the host block it; the GPU sits idle for {} of the step ({} per step) "
          "while the host waits in them or has not launched again since (Nsight rules "
          "cuda_api_sync, cuda_memcpy_sync).",
          calls, Pct(B->sync), d2h, Pct(B->idle_sync), Ms(B->idle_sync * rep.step_s));
      f.fix = "Remove per-step synchronizations: loss.item(), .cpu(), print(tensor), "
              "torch.cuda.synchronize() and non-pinned copies to the host. Accumulate metrics "
              "on the GPU and read them every N steps.";
      f.expected_speedup = SpeedupFromRemoving(rep.step_s, B->idle_sync * rep.step_s);
      F.push_back(f);
    }
    bool optimizer_finding = false;
    if (rep.gpu && B->idle_optimizer >= th.host_warn) {
      optimizer_finding = true;
      Finding f;
      f.id = "host.optimizer";
      f.severity = B->idle_optimizer >= th.host_verdict ? "high" : "medium";
      f.title = "The GPU waits while the host runs the optimizer step";
      std::string opt_name;
      for (const auto& t : in.traces) {
        if (opt_name.empty()) opt_name = t.optimizer_name;
      }
      f.evidence = fmt::format(
          "Optimizer.step/zero_grad{} take {} of the step on the host ({} per step); the GPU "
          "is idle for {} of the step ({} per step) inside them: the host prepares and launches the "
          "optimizer's many small kernels slower than the GPU runs them.",
          opt_name.empty() ? "" : " (" + opt_name + ")", Pct(B->optimizer),
          Ms(B->optimizer * rep.step_s), Pct(B->idle_optimizer),
          Ms(B->idle_optimizer * rep.step_s));
      static const char* kTorchOptim[] = {"SGD",   "Adam",    "AdamW",  "Adamax", "NAdam",
                                          "RAdam", "RMSprop", "Adagrad", "Adadelta", "ASGD",
                                          "Rprop"};
      bool torch_optim = false;
      for (const char* o : kTorchOptim) torch_optim = torch_optim || opt_name == o;
      if (torch_optim) {
        f.fix = fmt::format(
            "torch.optim.{} runs one small kernel per parameter tensor unless told otherwise: "
            "pass foreach=True{} (or torch.compile the optimizer step), and call "
            "zero_grad(set_to_none=True).",
            opt_name,
            (opt_name == "Adam" || opt_name == "AdamW" || opt_name == "SGD")
                ? ", or fused=True for the single-kernel CUDA implementation"
                : "");
      } else {
        f.fix = fmt::format(
            "Use a multi-tensor implementation of the optimizer{}: its foreach/fused variant "
            "if it has one (torch.optim: foreach=True or fused=True; apex/DeepSpeed fused "
            "optimizers), or torch.compile the optimizer step; do its bookkeeping less often "
            "(e.g. preconditioner updates every N steps); call zero_grad(set_to_none=True).",
            opt_name.empty() ? "" : " (" + opt_name + ")");
      }
      f.expected_speedup = SpeedupFromRemoving(rep.step_s, B->idle_optimizer * rep.step_s);
      F.push_back(f);
    }
    double launch_idle = B->idle_host - (optimizer_finding ? B->idle_optimizer : 0.0);
    if (rep.gpu && launch_idle >= th.host_warn) {
      double kps = 0, mk = 0;
      for (const auto& r : rep.ranks) {
        kps += r.kernels_per_step / static_cast<double>(rep.ranks.size());
        for (const auto& g : r.gpus) mk = std::max(mk, g.mean_kernel_us);
      }
      Finding f;
      f.id = "host.launch";
      f.severity = launch_idle >= th.host_verdict ? "high" : "medium";
      f.title = "The GPU waits for the host to launch work (launch or Python overhead)";
      f.evidence = fmt::format(
          "The GPU is idle for {} of the step ({} per step) outside DataLoader waits, copies "
          "and syncs{}; {:.0f} kernels per step, {:.0f} µs each on average.",
          Pct(launch_idle), Ms(launch_idle * rep.step_s),
          optimizer_finding ? " and the optimizer step" : "", kps, mk);
      f.fix = mk < 20 ? "Many short kernels: capture the step with CUDA Graphs or "
                        "torch.compile(mode=\"reduce-overhead\"), fuse small ops, or raise the "
                        "batch size so each kernel does more work."
                      : "The host falls behind between kernels: look for Python work in the "
                        "step (logging, metric code, per-sample loops), move it off the "
                        "critical path, or use torch.compile to cut framework overhead.";
      f.fix += " The profiler itself adds host time per operator (more with record_shapes "
               "and with_stack): confirm the gap on an unprofiled run (stoker watch) before "
               "optimizing.";
      f.expected_speedup = SpeedupFromRemoving(rep.step_s, launch_idle * rep.step_s);
      F.push_back(f);
    }
    if (!rep.gpu && B->idle >= th.host_warn * 2) {
      Finding f;
      f.id = "host.overhead";
      f.severity = B->idle >= th.host_verdict ? "high" : "low";
      f.title = "Time in the training loop outside any operator";
      f.evidence = fmt::format(
          "{} of the step ({} per step) is spent outside PyTorch operators and DataLoader "
          "waits: Python code in the loop, logging, the profiler itself.",
          Pct(B->idle), Ms(B->idle * rep.step_s));
      f.fix = "Profile the Python side (py-spy, torch.profiler with with_stack=True) and move "
              "per-step Python work (logging, metrics, checkpoint checks) out of the loop or "
              "to every N steps.";
      f.expected_speedup = SpeedupFromRemoving(rep.step_s, B->idle * rep.step_s);
      F.push_back(f);
    }

    // Compute-side opportunities (GPU).
    if (rep.gpu) {
      bool tc_capable = false, tc_used = false, tc_eligible = false, dp = false;
      int64_t peak = -1, total = 0;
      for (const auto& r : rep.ranks) {
        tc_capable |= r.tc_capable, tc_used |= r.tensor_cores_used, tc_eligible |= r.tc_eligible;
        dp |= r.dataparallel_multi_gpu;
        peak = std::max(peak, r.peak_mem_bytes);
        total = std::max(total, r.total_mem_bytes);
      }
      if (tc_capable && !tc_used && tc_eligible) {
        Finding f;
        f.id = "compute.amp";
        f.severity = B->compute >= 0.5 ? "medium" : "low";
        f.title = "Tensor cores are not used";
        f.evidence = "The GPU has tensor cores (compute capability >= 7.0) and the trace has "
                     "GEMM/convolution kernels, but no tensor-core kernels (TensorBoard plugin "
                     "rule R6).";
        f.fix = "Enable automatic mixed precision: with torch.autocast(\"cuda\", "
                "dtype=torch.bfloat16) around the forward pass (fp16 needs a GradScaler), or "
                "at least torch.backends.cuda.matmul.allow_tf32 = True on Ampere and newer.";
        F.push_back(f);
      }
      if (dp) {
        Finding f;
        f.id = "compute.dataparallel";
        f.severity = "medium";
        f.title = "DataParallel on several GPUs";
        f.evidence = "DataParallel.forward runs with kernels on more than one GPU.";
        f.fix = "Use DistributedDataParallel (one process per GPU): DataParallel replicates the "
                "model every step and is bound by one Python thread (TensorBoard plugin R2).";
        F.push_back(f);
      }
      if (peak > 0 && total > 0) {
        double mf = static_cast<double>(peak) / static_cast<double>(total);
        if (mf >= th.mem_limit) {
          Finding f;
          f.id = "memory.limit";
          f.severity = "medium";
          f.title = "Device memory is at the limit";
          f.evidence = fmt::format("Peak allocated memory is {} of the device's.", Pct(mf));
          f.fix = "Activation (gradient) checkpointing or mixed precision free memory for a "
                  "larger batch (TensorBoard plugin R7).";
          F.push_back(f);
        } else if (B->compute < th.low_util && input_score < th.input_verdict &&
                   B->comm < th.comm_verdict) {
          Finding f;
          f.id = "compute.batch";
          f.severity = "medium";
          f.title = "Low GPU utilization with memory to spare";
          f.evidence = fmt::format(
              "Compute kernels run {} of the step and peak memory is {} of the device's.",
              Pct(B->compute), Pct(mf));
          f.fix = "Raise the batch size (scale the learning rate accordingly) so each kernel "
                  "does more work (TensorBoard plugin R5).";
          F.push_back(f);
        }
      }
    }
  }

  // GPU logs.
  double util_mean = NAN, throttled = 0;
  for (const auto& g : rep.gpu_logs) {
    if (!std::isnan(g.util_mean)) {
      util_mean = std::isnan(util_mean) ? g.util_mean : std::min(util_mean, g.util_mean);
    }
    if (!std::isnan(g.throttled_busy_frac)) throttled = std::max(throttled, g.throttled_busy_frac);
    if (g.starvation_periods > 0) {
      Finding f;
      f.id = "gpu.starvation";
      f.severity = g.starved_gpu_frac >= th.input_verdict ? "high" : "medium";
      f.title = "Periods where the GPU is starved";
      std::string per_gpu;
      for (const auto& [gpu, secs] : g.starvation_by_gpu) {
        if (!per_gpu.empty()) per_gpu += ", ";
        per_gpu += gpu >= 0 ? fmt::format("GPU {} {:.1f} s", gpu, secs) : fmt::format("{:.1f} s", secs);
      }
      f.evidence = fmt::format(
          "{}: {} period{} with utilization below {:.0f}% for at least {:.1f} s ({}); the most "
          "starved GPU{} is starved {} of the {:.0f} s sampled, the longest period {:.1f} s; "
          "mean utilization {:.0f}%.",
          g.path, g.starvation_periods, g.starvation_periods == 1 ? "" : "s",
          th.low_util * 100, th.starvation_gap_s, per_gpu,
          g.starved_gpu >= 0 ? fmt::format(" ({})", g.starved_gpu) : std::string(),
          Pct(g.starved_gpu_frac), g.duration_s, g.longest_starvation_s, g.util_mean);
      if (g.starvation_by_gpu.size() < static_cast<size_t>(std::max(1, g.gpus)) && g.gpus > 1) {
        f.evidence += " Only some GPUs starve: if they train one job, look at what differs "
                      "(their ranks' input, their node).";
      }
      f.fix = "Record a profiler trace over one of these periods (torch.profiler with a "
              "schedule) and run stoker doctor on it to tell data waits from host overhead; "
              "periodic gaps often come from evaluation, checkpointing or the DataLoader "
              "restarting its workers each epoch (persistent_workers=True).";
      f.expected_speedup = SpeedupFromRemoving(1.0, g.starved_gpu_frac);
      F.push_back(f);
    }
    if (!std::isnan(g.throttled_busy_frac) && g.throttled_busy_frac >= th.throttle_verdict / 2) {
      Finding f;
      f.id = "gpu.throttle";
      f.severity = g.throttled_busy_frac >= th.throttle_verdict ? "high" : "medium";
      f.title = "Clocks are throttled while the GPU is busy";
      f.evidence = fmt::format(
          "{}: {} of busy samples report {} (max temperature {:.0f} C, max power {:.0f} W{}).",
          g.path, Pct(g.throttled_busy_frac), telemetry::ThrottleReasonNames(g.throttle_bits_seen),
          g.temp_max_c, g.power_max_w,
          std::isnan(g.power_limit_w) ? std::string()
                                      : fmt::format(", limit {:.0f} W", g.power_limit_w));
      if (!std::isnan(g.throttled_sm_clock_mhz) && !std::isnan(g.max_sm_clock_mhz) &&
          g.max_sm_clock_mhz > 0) {
        f.evidence += fmt::format(" The SM clock averages {:.0f} MHz in those samples, {} of "
                                  "the {:.0f} MHz maximum.",
                                  g.throttled_sm_clock_mhz,
                                  Pct(g.throttled_sm_clock_mhz / g.max_sm_clock_mhz),
                                  g.max_sm_clock_mhz);
      }
      f.fix = (g.throttle_bits_seen & telemetry::kThrottleThermalMask)
                  ? "Thermal or hardware slowdown: check cooling and airflow, fans, and the "
                    "node's other load; report the node to the cluster admins."
                  : "Power capping: the GPU holds its power limit by lowering clocks. At the "
                    "default limit under full load this is normal operation; if the limit is "
                    "below the board's default (nvidia-smi -q -d POWER), raise it or ask for "
                    "the cluster's power policy, and check whether other GPUs share the budget.";
      F.push_back(f);
    }
    // DCGM guidance: SM activity >= 0.8 is necessary for good use; < 0.5 likely ineffective.
    if (!std::isnan(g.sm_active_mean) && g.sm_active_mean < 0.5 && !std::isnan(g.util_mean) &&
        g.util_mean >= th.busy_util_pct) {
      Finding f;
      f.id = "gpu.sm_activity";
      f.severity = "medium";
      f.title = "The GPU is busy but its SMs are mostly idle";
      f.evidence = fmt::format(
          "{}: utilization averages {:.0f}% (a kernel is running), but SM activity averages "
          "{:.2f} (DCGM: below 0.5 likely indicates ineffective GPU use; 0.8 is needed).",
          g.path, g.util_mean, g.sm_active_mean);
      f.fix = "The kernels do not fill the GPU: raise the batch size (or sequence packing), "
              "fuse small kernels (torch.compile), and check with a profiler trace which "
              "kernels dominate.";
      F.push_back(f);
    }
    if (!std::isnan(g.tensor_active_mean) && g.tensor_active_mean < 0.01 &&
        !std::isnan(g.sm_active_mean) && g.sm_active_mean >= 0.3) {
      Finding f;
      f.id = "gpu.tensor_cores";
      f.severity = "low";
      f.title = "Tensor cores are idle";
      f.evidence = fmt::format("{}: tensor pipe activity averages {:.3f} while SM activity is "
                               "{:.2f}.",
                               g.path, g.tensor_active_mean, g.sm_active_mean);
      f.fix = "If the model is matmul/convolution heavy, enable mixed precision "
              "(torch.autocast with bf16/fp16) or TF32 (torch.backends.cuda.matmul.allow_tf32).";
      F.push_back(f);
    }
    if (!std::isnan(g.mem_used_max_frac) && g.mem_used_max_frac < 0.5 && !std::isnan(g.util_mean) &&
        g.util_mean < th.low_util * 100 * 1.6) {
      Finding f;
      f.id = "gpu.memory_headroom";
      f.severity = "info";
      f.title = "GPU memory to spare";
      f.evidence = fmt::format("{}: at most {} of GPU memory is used.", g.path,
                               Pct(g.mem_used_max_frac));
      f.fix = "A larger batch fits: it amortizes per-step overhead (raise the learning rate "
              "with it, or keep the global batch with fewer accumulation steps).";
      F.push_back(f);
    }
    if (!std::isnan(g.proc_cpu_cores_mean) && !std::isnan(g.cpus) && g.cpus > 0 &&
        g.proc_cpu_cores_mean >= 0.85 * g.cpus && !std::isnan(g.util_mean) &&
        g.util_mean < th.low_util * 100) {
      Finding f;
      f.id = "cpu.saturated";
      f.severity = "high";
      f.title = "The CPU is saturated while the GPU waits";
      f.evidence = fmt::format("{}: the training process tree uses {:.1f} of {:.0f} cores on "
                               "average while GPU utilization averages {:.0f}%.",
                               g.path, g.proc_cpu_cores_mean, g.cpus, g.util_mean);
      f.fix = "Preprocessing is CPU-bound: decode less (smaller stored images, DCT-scaled JPEG "
              "decode), move augmentation to the GPU, or get more cores per GPU; more "
              "DataLoader workers will not help.";
      F.push_back(f);
    }
  }
  if (!rep.gpu_logs.empty()) {
    cands.push_back({Verdict::kThrottled, throttled, th.throttle_verdict});
    if (!rep.has_trace && !std::isnan(util_mean)) {
      // No trace: utilization alone says the GPU waits, not on what. The score is the
      // larger of the mean idle share and the most starved GPU's starved share.
      double starved = 0;
      for (const auto& g : rep.gpu_logs) starved = std::max(starved, g.starved_gpu_frac);
      cands.push_back({Verdict::kInputBound, std::max(1.0 - util_mean / 100.0, starved),
                       1.0 - th.low_util});
    }
  }

  // Pipeline metrics.
  if (rep.pipeline) {
    const auto& p = *rep.pipeline;
    if (!rep.has_trace) {
      cands.push_back({Verdict::kInputBound, p.consumer_wait_frac, th.input_verdict});
    }
    if (p.bottleneck_kind != "consumer" && !p.bottleneck.empty()) {
      Finding f;
      f.id = "pipeline.stage";
      f.severity = p.consumer_wait_frac >= th.input_verdict ? "high" : "info";
      f.title = fmt::format("The '{}' stage bounds the stoker pipeline", p.bottleneck);
      std::string stages;
      for (const auto& s : p.stages) {
        if (!stages.empty()) stages += ", ";
        stages += fmt::format("{} {} busy x{}", s.name, Pct(s.busy_frac), s.threads);
      }
      f.evidence = fmt::format(
          "{:.0f} samples/s; the consumer waits {} of the time; stages: {}; {:.1f} cores busy{}.",
          p.samples_per_s, Pct(p.consumer_wait_frac), stages, p.cores_busy,
          p.cpus > 0 ? fmt::format(" of {}", p.cpus) : std::string());
      if (p.bottleneck_kind == "storage") {
        f.fix = "Storage-bound: read larger sequential shards (WebDataset/TFRecord, stoker "
                "convert), add a local NVMe cache, raise read parallelism for network storage.";
      } else if (p.bottleneck_kind == "decode" || p.bottleneck_kind == "ops") {
        const char* what = p.bottleneck_kind == "decode" ? "Decode" : "Augmentation";
        const char* cheaper = p.bottleneck_kind == "decode"
                                  ? "store smaller images, use DCT-scaled/region decode, or "
                                    "decode on the GPU (nvJPEG/DALI)"
                                  : "move augmentation to the GPU or simplify it";
        if (!p.cores_saturated) {
          f.fix = fmt::format("{}-bound with idle cores ({:.1f} of {} busy): give the pipeline "
                              "more threads (stoker tune, or raise --threads/cpu_budget).",
                              what, p.cores_busy, p.cpus > 0 ? p.cpus : p.threads);
        } else if (p.cpus > 0) {
          f.fix = fmt::format("{}-bound with the {} cores saturated: {}.", what, p.cpus, cheaper);
        } else {
          // Saturated against its own threads; the machine's cores are not recorded.
          f.fix = fmt::format("{}-bound, its {} thread{} busy all the time: if the machine has "
                              "idle cores, give the pipeline more threads (stoker tune, "
                              "--threads); if not, {}.",
                              what, p.threads, p.threads == 1 ? "" : "s", cheaper);
        }
      } else {
        f.fix = "Batching/prefetch-bound: raise prefetch and the memory budget.";
      }
      F.push_back(f);
    }
  }

  if (rep.pipeline && !rep.has_trace && rep.gpu_logs.empty() &&
      rep.pipeline->consumer_wait_frac >= 0.95) {
    rep.notes.push_back("The pipeline's consumer waited almost all the time: it did no work "
                        "(a benchmark drain), so the verdict is about the pipeline's capacity; "
                        "compare its samples/s with what the training step consumes.");
  }
  if (rep.pipeline && rep.pipeline->cpus <= 0) {
    rep.notes.push_back(fmt::format(
        "{}: the cores available to the pipeline are not recorded: core saturation is judged "
        "against its {} threads; pass --cpus N for the machine's cores.",
        rep.pipeline->path, rep.pipeline->threads));
  }

  // Verdict.
  // The straggler competes like any other cause: when every rank waits for its
  // DataLoader and one a little longer, the loaders are the thing to fix (the straggler
  // stays a finding); when one rank alone is slow, its excess dominates.
  const Candidate* best = nullptr;
  for (const auto& c : cands) {
    if (c.score < c.threshold) continue;
    if (best == nullptr || c.norm() > best->norm()) best = &c;
  }
  const Candidate* runner = nullptr;
  for (const auto& c : cands) {
    if (&c == best || c.v == (best ? best->v : Verdict::kHealthy)) continue;
    if (runner == nullptr || c.norm() > runner->norm()) runner = &c;
  }
  double compute_share =
      rep.has_trace ? B->compute : (std::isnan(util_mean) ? 0 : util_mean / 100.0);
  if (best != nullptr) {
    rep.primary = best->v;
    double c = 0.55 + 0.35 * std::min(1.0, best->norm() - 1.0);
    if (runner != nullptr && runner->score >= runner->threshold &&
        runner->norm() >= 0.8 * best->norm()) {
      c -= 0.2;
    }
    if (rep.has_trace && rep.steps < 3) c -= 0.15;
    if (best->v == Verdict::kCommunicationBound) {
      // Exposed communication of a subset of the ranks mixes transfer with waiting for
      // the ranks not shown.
      int world = 0;
      for (const auto& t : in.traces) world = std::max(world, t.world_size);
      if (world > static_cast<int>(rep.ranks.size())) c -= 0.15;
    }
    if (!rep.has_trace) c -= 0.2;
    rep.confidence = std::clamp(c, 0.2, 0.98);
  } else if (compute_share >= th.compute_bound && B->data_wait < th.input_warn) {
    rep.primary = Verdict::kComputeBound;
    double c = 0.6 + 0.35 * std::min(1.0, (compute_share - th.compute_bound) / 0.15);
    if (!rep.has_trace) c -= 0.2;
    rep.confidence = std::clamp(c, 0.2, 0.95);
  } else {
    rep.primary = Verdict::kHealthy;
    double margin = 1.0;
    for (const auto& c : cands) margin = std::min(margin, 1.0 - c.norm());
    rep.confidence = std::clamp(0.5 + 0.4 * margin, 0.3, 0.9);
    if (!rep.has_trace) rep.confidence = std::max(0.3, rep.confidence - 0.2);
  }
  if (rep.primary == Verdict::kComputeBound && rep.has_trace) {
    Finding f;
    f.id = "compute.bound";
    f.severity = "info";
    f.title = rep.gpu ? "The GPU is busy computing: the input pipeline keeps up"
                      : "The step is spent in compute: the input pipeline keeps up";
    f.evidence = fmt::format("Compute takes {} of the {} step; the DataLoader wait is {}.",
                             Pct(B->compute), Ms(rep.step_s), Pct1(B->data_wait));
    f.fix = rep.gpu ? "To go faster, make the model cheaper: mixed precision (torch.autocast), "
                      "torch.compile, fused optimizers, a larger batch if memory allows."
                    : "To go faster, make the model cheaper or run it on an accelerator; more "
                      "DataLoader workers will not help.";
    F.push_back(f);
  }

  std::stable_sort(F.begin(), F.end(), [](const Finding& a, const Finding& b) {
    double ga = a.expected_speedup.value_or(1.0), gb = b.expected_speedup.value_or(1.0);
    if (std::abs(ga - gb) > 1e-9) return ga > gb;
    return SeverityRank(a.severity) < SeverityRank(b.severity);
  });
  rep.findings = std::move(F);

  // One-sentence summary.
  auto top_gain = [&](const char* id) -> std::string {
    for (const auto& f : rep.findings) {
      if (f.id == id && f.expected_speedup) return " (up to " + X(*f.expected_speedup) + ")";
    }
    return "";
  };
  std::string step = rep.has_trace ? Ms(rep.step_s) : "";
  switch (rep.primary) {
    case Verdict::kInputBound:
      rep.summary = rep.has_trace
                        ? (rep.gpu ? fmt::format(
                                         "Input-bound: the GPU waits for input {} of each {} "
                                         "step (DataLoader {}, host-to-device copies {}){}.",
                                         Pct(B->idle_data + B->h2d + B->idle_copy), step,
                                         Pct(B->idle_data), Pct(B->h2d + B->idle_copy),
                                         B->idle_data >= B->h2d + B->idle_copy
                                             ? top_gain("input.dataloader")
                                             : top_gain("h2d.pageable") + top_gain("h2d.exposed"))
                                   : fmt::format("Input-bound: {} of each {} step waits for the "
                                                 "DataLoader{}.",
                                                 Pct(B->data_wait), step,
                                                 top_gain("input.dataloader")))
                        : (rep.pipeline && !rep.has_trace && rep.gpu_logs.empty()
                               ? (rep.pipeline->consumer_wait_frac >= 0.95
                                      ? fmt::format(
                                            "The pipeline delivers {:.0f} samples/s, bound by "
                                            "its '{}' stage; its consumer only drained it (a "
                                            "benchmark), so it starves training that could "
                                            "consume more than that.",
                                            rep.pipeline->samples_per_s,
                                            rep.pipeline->bottleneck)
                                      : fmt::format("Input-bound: the consumer waits {} of the "
                                                    "time for the pipeline.",
                                                    Pct(rep.pipeline->consumer_wait_frac)))
                               : fmt::format("The GPU is mostly idle (mean utilization {:.0f}%): "
                                             "likely starved for input; record a trace to "
                                             "confirm.",
                                             util_mean));
      break;
    case Verdict::kComputeBound:
      rep.summary = fmt::format("Compute-bound: compute fills {} of the {} step and the input "
                                "pipeline keeps up.",
                                rep.has_trace ? Pct(B->compute) : Pct(compute_share),
                                rep.has_trace ? step : std::string("sampled"));
      break;
    case Verdict::kCommunicationBound:
      rep.summary = fmt::format("Communication-bound: {} of each {} step is exposed "
                                "communication{}.",
                                Pct(B->comm), step, top_gain("comm.exposed"));
      break;
    case Verdict::kImbalance:
      rep.summary = fmt::format("Imbalance: rank {} is the straggler ({} more work per step, "
                                "cause: {}); the other ranks wait for it{}.",
                                rep.cross.straggler_rank, Ms(rep.cross.straggler_excess_s),
                                rep.cross.straggler_cause, top_gain("imbalance.straggler"));
      break;
    case Verdict::kHostBound:
      rep.summary = rep.gpu ? fmt::format("Host-bound: the GPU waits {} of each {} step for the "
                                          "host (launch/Python overhead {}, syncs {}).",
                                          Pct(B->idle_host + B->idle_sync), step,
                                          Pct(B->idle_host), Pct(B->idle_sync))
                            : fmt::format("Host-bound: {} of each {} step is spent outside "
                                          "operators (Python overhead).",
                                          Pct(B->idle), step);
      break;
    case Verdict::kThrottled:
      rep.summary = fmt::format("Throttled: the GPU clocks are throttled in {} of busy samples.",
                                Pct(throttled));
      break;
    case Verdict::kUnknown:  // never chosen here (watch_rules.cc sets it)
      break;
    case Verdict::kHealthy:
      rep.summary = rep.has_trace
                        ? fmt::format("Healthy: no single bottleneck; DataLoader wait {}, "
                                      "compute {} of the {} step.",
                                      Pct(B->data_wait), Pct(B->compute), step)
                        : (!std::isnan(util_mean)
                               ? fmt::format("Healthy on average: GPU utilization averages "
                                             "{:.0f}%{}.",
                                             util_mean,
                                             std::any_of(rep.findings.begin(), rep.findings.end(),
                                                         [](const Finding& f) {
                                                           return f.id == "gpu.starvation";
                                                         })
                                                 ? ", but with starved periods (see the "
                                                   "findings); a trace tells why"
                                                 : "")
                               : "Healthy: no bottleneck visible in these inputs.");
      break;
  }
  if (rep.pipeline && !rep.has_trace && rep.gpu_logs.empty() &&
      rep.pipeline->consumer_wait_frac >= 0.95) {
    rep.confidence = std::min(rep.confidence, 0.5);  // a benchmark says nothing of the model
  }
  bool any_util = false;
  for (const auto& g : rep.gpu_logs) any_util = any_util || !std::isnan(g.util_mean);
  if (!rep.has_trace && !rep.pipeline && !rep.gpu_logs.empty() && !any_util) {
    // Host samples only (stoker watch without a GPU or driver): say what was seen.
    const GpuLogReport& g = rep.gpu_logs.front();
    rep.confidence = std::min(rep.confidence, 0.3);
    rep.summary = "No GPU samples (no GPU or driver while sampling): nothing can be said about "
                  "GPU starvation";
    if (!std::isnan(g.proc_cpu_cores_mean)) {
      rep.summary += fmt::format("; the process tree used {:.1f}{} cores on average",
                                 g.proc_cpu_cores_mean,
                                 std::isnan(g.cpus) ? std::string()
                                                    : fmt::format(" of {:.0f}", g.cpus));
      if (!std::isnan(g.read_mib_s_mean)) {
        rep.summary += fmt::format(" and read {:.1f} MiB/s from disk", g.read_mib_s_mean);
      }
    }
    rep.summary += ". Record a profiler trace for a breakdown.";
  }
  if (!rep.gpu_logs.empty() && !any_util) {
    rep.notes.push_back("The GPU logs have no GPU utilization samples (no GPU or driver while "
                        "sampling): CPU and I/O only.");
  }
  if (rep.has_trace && !rep.gpu) {
    rep.notes.push_back("The trace has no GPU events: CPU-side analysis only.");
  }
  return rep;
}

Result<Report> DiagnoseSteps(const std::vector<StepTiming>& steps, const DoctorOptions& opts) {
  if (steps.empty()) return InvalidArgument("DiagnoseSteps: no steps");
  double total = 0, data = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    if (!(s.step_s > 0) || s.data_wait_s < 0 || s.data_wait_s > s.step_s * 1.000001 ||
        !std::isfinite(s.step_s) || !std::isfinite(s.data_wait_s)) {
      return InvalidArgument("DiagnoseSteps: step {} has data_wait_s={} and step_s={}", i,
                             s.data_wait_s, s.step_s);
    }
    total += s.step_s;
    data += s.data_wait_s;
  }
  const Thresholds& th = opts.thresholds;
  Report rep;
  rep.has_trace = true;
  rep.steps = static_cast<int>(steps.size());
  rep.step_s = total / static_cast<double>(steps.size());
  rep.steps_per_s = 1.0 / rep.step_s;
  rep.batch_size = opts.batch_size;
  if (opts.batch_size > 0) rep.samples_per_s = rep.steps_per_s * opts.batch_size;
  rep.breakdown.data_wait = data / total;
  rep.breakdown.compute = 1.0 - rep.breakdown.data_wait;  // the rest of the step
  rep.inputs.push_back("per-step timings (stoker.watch)");
  RankReport r;
  r.rank = 0;
  r.path = "stoker.watch";
  r.format = "step timings";
  r.steps = rep.steps;
  r.f = rep.breakdown;
  r.step_s_mean = rep.step_s;
  std::vector<double> durs;
  double t = 0;
  for (const auto& s : steps) {
    StepRow row;
    row.number = static_cast<int64_t>(r.step_rows.size());
    row.start_s = t;
    row.dur_s = s.step_s;
    row.f.data_wait = s.data_wait_s / s.step_s;
    row.f.compute = 1.0 - row.f.data_wait;
    r.step_rows.push_back(row);
    durs.push_back(s.step_s);
    t += s.step_s;
  }
  r.step_s_p50 = Percentile(durs, 0.5);
  r.step_s_p90 = Percentile(durs, 0.9);
  r.steps_per_s = rep.steps_per_s;
  r.samples_per_s = rep.samples_per_s;
  rep.ranks.push_back(r);
  double d = rep.breakdown.data_wait;
  if (d >= th.input_warn) {
    rep.findings.push_back(InputFinding(d, d, rep.step_s, rep.steps, "", false, opts.cpus, th, -1));
  }
  if (d >= th.input_verdict) {
    rep.primary = Verdict::kInputBound;
    rep.confidence = std::clamp(0.55 + 0.35 * std::min(1.0, d / th.input_verdict - 1.0), 0.2, 0.9);
    rep.summary = fmt::format("Input-bound: {} of each {} step waits for the DataLoader (up to "
                              "{}).",
                              Pct(d), Ms(rep.step_s),
                              X(SpeedupFromRemoving(rep.step_s, d * rep.step_s)));
  } else if (d < th.input_warn) {
    rep.primary = Verdict::kComputeBound;
    rep.confidence = std::clamp(0.6 + 0.3 * (1.0 - d / th.input_warn), 0.3, 0.85);
    rep.summary = fmt::format("Not input-bound: the DataLoader wait is {} of the {} step; the "
                              "rest is the training step itself.",
                              Pct1(d), Ms(rep.step_s));
  } else {
    rep.primary = Verdict::kHealthy;
    rep.confidence = 0.5;
    rep.summary = fmt::format("Mostly fed: the DataLoader wait is {} of the {} step (up to {} "
                              "if removed).",
                              Pct(d), Ms(rep.step_s),
                              X(SpeedupFromRemoving(rep.step_s, d * rep.step_s)));
  }
  rep.notes.push_back("Per-step timings only: the GPU side (copies, syncs, communication) is "
                      "not visible; record a profiler trace for the full breakdown.");
  return rep;
}

// ---------------------------------------------------------------------------------------
// Loading.

namespace {

enum class Kind { kTrace, kGpuLog, kPipeline, kUnknown };

Kind Sniff(const std::string& head) {
  size_t i = 0;
  while (i < head.size() && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' ||
                             head[i] == '\t'))
    ++i;
  if (i >= head.size()) return Kind::kUnknown;
  char c = head[i];
  if (c == '[') return Kind::kTrace;
  if (c == '{') {
    if (head.find("\"traceEvents\"") != std::string::npos ||
        head.find("\"schemaVersion\"") != std::string::npos ||
        head.find("\"deviceProperties\"") != std::string::npos) {
      return Kind::kTrace;
    }
    if (telemetry::LooksLikePipelineMetrics(head)) return Kind::kPipeline;
    if (head.find("\"stages\"") != std::string::npos) return Kind::kPipeline;
    // bench pipeline --json writes its keys sorted: a long skipped_items list can push
    // "stages" past the sniffed head.
    if (head.find("\"samples_per_s\"") != std::string::npos &&
        head.find("\"consumer_wait_frac\"") != std::string::npos) {
      return Kind::kPipeline;
    }
    return Kind::kUnknown;
  }
  if (telemetry::LooksLikeGpuLog(head)) return Kind::kGpuLog;
  return Kind::kUnknown;
}

// Ranks beyond this are not believed (a file name or a corrupt distributedInfo).
constexpr int kMaxRank = 1 << 20;

int RankFromName(const std::string& path) {
  static const std::regex re(R"((?:rank|worker)[-_.]?(\d{1,7}))", std::regex::icase);
  std::smatch m;
  std::string base = BaseName(path);
  if (std::regex_search(base, m, re)) {
    long v = std::strtol(m[1].str().c_str(), nullptr, 10);  // at most 7 digits: no overflow
    return v <= kMaxRank ? static_cast<int>(v) : -1;
  }
  return -1;
}

bool Listable(const std::string& name) {
  auto ends = [&](const char* s) {
    size_t n = std::strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  return ends(".json") || ends(".json.gz") || ends(".csv") || ends(".log") || ends(".txt") ||
         ends(".csv.gz") || ends(".log.gz");
}

}  // namespace

Result<DoctorInputs> LoadInputs(Env* env, const std::vector<std::string>& paths,
                                const LoadOptions& opts) {
  DoctorInputs in;
  std::vector<std::string> files;
  for (const auto& p : paths) {
    auto st = env->Stat(p);
    if (!st.ok()) return NotFound("{}: no such file or folder", p);
    if (st->is_dir) {
      STOKER_ASSIGN_OR_RETURN(auto entries, env->ListDir(p));
      size_t before = files.size();
      for (const auto& e : entries) {
        if (e.is_dir) continue;
        if (Listable(e.name)) {
          files.push_back(JoinPath(p, e.name));
        } else {
          in.notes.push_back(fmt::format("skipped {} in {}", e.name, p));
        }
      }
      if (files.size() == before) {
        // A TensorBoard log dir keeps each run's traces one level down
        // (plugins/profile/<run>/): name the subfolders that have some.
        std::string sub;
        int shown = 0;
        for (const auto& e : entries) {
          if (!e.is_dir) continue;
          auto inner = env->ListDir(JoinPath(p, e.name));
          if (!inner.ok()) continue;
          bool has = std::any_of(inner->begin(), inner->end(),
                                 [](const auto& f) { return !f.is_dir && Listable(f.name); });
          if (has && shown++ < 5) sub += (sub.empty() ? "" : ", ") + JoinPath(p, e.name);
        }
        return InvalidArgument("{}: the folder has no trace, log or metrics files "
                               "(*.json, *.json.gz, *.csv, *.log){}",
                               p,
                               sub.empty() ? std::string()
                                           : "; these subfolders have some (give one run's "
                                             "folder): " + sub);
      }
    } else {
      files.push_back(p);
    }
  }
  for (const auto& f : files) {
    STOKER_ASSIGN_OR_RETURN(std::string head, telemetry::ReadHead(env, f, 64 << 10));
    if (head.empty()) return InvalidArgument("{}: empty file", f);
    if (head.find('\0') != std::string::npos) {
      return InvalidArgument("{}: a binary file: not a trace (JSON), a GPU log (CSV/dmon) or "
                             "pipeline metrics (JSON)",
                             f);
    }
    switch (Sniff(head)) {
      case Kind::kTrace: {
        STOKER_ASSIGN_OR_RETURN(auto t, telemetry::ReadTrace(env, f, opts.trace));
        if (t.rank < 0) t.rank = RankFromName(f);
        in.traces.push_back(std::move(t));
        break;
      }
      case Kind::kGpuLog: {
        STOKER_ASSIGN_OR_RETURN(auto l, telemetry::ReadGpuLog(env, f, opts.gpu_log));
        in.gpu_logs.push_back(std::move(l));
        break;
      }
      case Kind::kPipeline: {
        STOKER_ASSIGN_OR_RETURN(auto m, telemetry::ReadPipelineMetrics(env, f));
        in.pipelines.push_back(std::move(m));
        break;
      }
      case Kind::kUnknown:
        return InvalidArgument(
            "{}: not a PyTorch profiler trace (Chrome trace JSON), an nvidia-smi/dcgmi log or "
            "stoker pipeline metrics (JSON with \"stages\")",
            f);
    }
  }
  // Ranks: unique; fill unknown ones in file order.
  std::set<int> used;
  for (auto& t : in.traces) {
    if (t.rank > kMaxRank) t.rank = -1;
    if (t.rank >= 0 && !used.insert(t.rank).second) {
      in.notes.push_back(fmt::format("{}: rank {} appears in another file too; numbered anew",
                                     t.path, t.rank));
      t.rank = -1;
    }
  }
  int next = 0;
  for (auto& t : in.traces) {
    if (t.rank >= 0) continue;
    while (used.count(next)) ++next;
    t.rank = next;
    used.insert(next);
  }
  return in;
}

}  // namespace stoker::doctor
