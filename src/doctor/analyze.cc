// Per-input analyses: a trace's step windows and breakdown, a GPU log's utilization and
// starvation, a pipeline's bottleneck and cores.
#include <cstdint>
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "doctor/analysis.h"

namespace stoker::doctor {

using telemetry::Interval;
using telemetry::IntervalSet;
using telemetry::MeasureInWindows;
using telemetry::TraceSummary;

namespace {
constexpr double kNs = 1e-9;
}  // namespace

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

namespace {

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
  r.steps_from = t.steps_from;
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
  r.wall_s = m.wall_s;
  r.cache = m.cache;
  r.cache_hit_rate = m.cache_hit_rate;
  r.cache_stall_s = m.cache_stall_s;
  r.cache_fetched_bytes = m.cache_fetched_bytes;
  r.cache_stream_bytes = m.cache_stream_bytes;
  r.cache_shared_entries = m.cache_shared_entries;
  r.cache_evictions = m.cache_evictions;
  r.cache_limit_bytes = m.cache_limit_bytes;
  r.source_counters = m.source_counters;
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


// Ray Data stats: each operator's share of the remote wall time (the work of its tasks),
// the bottleneck (the largest share), and the consumer's wait. The wait is the time the
// training loop was blocked in iter_batches after its first batch (the first batch includes
// the cluster's and the operators' start-up, as a profiler's warm-up steps), against that
// plus the loop's own code between batches.
RayReport AnalyzeRay(const telemetry::RayDataStats& s) {
  RayReport r;
  r.path = s.path;
  double total_wall = 0;
  for (const auto& o : s.ops) {
    if (o.cached) continue;  // executed before, no numbers of its own
    RayOperatorRow row;
    row.number = o.number;
    row.name = o.name;
    row.tasks = o.tasks;
    row.blocks = o.blocks;
    row.elapsed_s = o.elapsed_s;
    row.wall_s = o.wall_s.present() ? o.wall_s.total : 0;
    row.cpu_s = o.cpu_s.present() ? o.cpu_s.total : 0;
    row.wall_mean_s = o.wall_s.mean;
    // Counts from the text: clamped before the cast (a corrupt file may say 1e300).
    if (o.rows_per_block.present()) {
      row.rows = static_cast<int64_t>(std::min(o.rows_per_block.total, 9e18));
    }
    if (o.bytes_per_block.present()) {
      row.bytes = static_cast<int64_t>(std::min(o.bytes_per_block.total, 9e18));
      row.bytes_per_block = o.bytes_per_block.mean;
    }
    if (o.elapsed_s > 0 && o.wall_s.present()) row.concurrency = row.wall_s / o.elapsed_s;
    row.nodes = o.nodes;
    total_wall += row.wall_s;
    r.ops.push_back(std::move(row));
  }
  double best = -1;
  for (size_t i = 0; i < r.ops.size(); ++i) {
    auto& o = r.ops[i];
    o.share = total_wall > 0 ? o.wall_s / total_wall : 0;
    if (o.wall_s > best) best = o.wall_s, r.bottleneck = static_cast<int>(i);
  }
  if (total_wall <= 0) r.bottleneck = -1;
  const auto& it = s.iter;
  r.iterator = it.present;
  if (it.present) {
    // Ray leaves out a line whose time is zero.
    auto z = [](double v) { return std::isnan(v) ? 0.0 : v; };
    r.blocked_s = z(it.blocked_s);
    r.first_batch_s = z(it.first_batch_s);
    r.user_s = z(it.user_s);
    r.wait_s = std::max(0.0, r.blocked_s - r.first_batch_s);
    if (r.wait_s + r.user_s > 0) r.consumer_wait_frac = r.wait_s / (r.wait_s + r.user_s);
    r.production_wait_s = it.production_wait_s;
    r.data_transfer_s = it.data_transfer_s;
    r.batching_s = it.batching_s;
    r.format_s = it.format_blocked_s;
    r.collate_s = it.collate_blocked_s;
    r.finalize_s = it.finalize_blocked_s;
    r.batches = it.batches;
    r.rows = it.rows;
  }
  r.rows_per_s = s.rows_per_s;
  double spilled = NAN;
  for (double v : {s.cluster_spilled_mb, s.dataset_spilled_mb}) {
    if (!std::isnan(v)) spilled = std::isnan(spilled) ? v : std::max(spilled, v);
  }
  double op_spilled = 0;
  for (const auto& o : s.ops) {
    if (!std::isnan(o.extra_spilled_bytes)) op_spilled += o.extra_spilled_bytes / 1e6;
  }
  if (op_spilled > 0) spilled = std::isnan(spilled) ? op_spilled : std::max(spilled, op_spilled);
  r.spilled_mb = spilled;
  return r;
}

}  // namespace stoker::doctor
