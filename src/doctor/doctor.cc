#include "doctor/doctor.h"

#include <cstdint>
#include <algorithm>
#include <cmath>

#include "doctor/analysis.h"
#include "doctor/text.h"
#include "telemetry/inputs.h"

namespace stoker::doctor {

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

int SeverityRank(const std::string& s) {
  if (s == "high") return 0;
  if (s == "medium") return 1;
  if (s == "low") return 2;
  return 3;
}

}  // namespace

void BuildAnalysis(Analysis* a) {
  Report& rep = *a->rep;
  const Thresholds& th = *a->th;
  if (rep.has_trace) {
    double n = static_cast<double>(rep.ranks.size());
    for (const auto& r : rep.ranks) {
      AddScaled(&rep.breakdown, r.f, 1.0 / n);
      rep.step_s += r.step_s_mean / n;
      rep.steps += r.steps;
      rep.gpu = rep.gpu || r.gpu;
    }
    std::vector<std::string> from;
    for (const auto& r : rep.ranks) {
      if (std::find(from.begin(), from.end(), r.steps_from) == from.end()) {
        from.push_back(r.steps_from);
      }
    }
    rep.steps_from.clear();
    for (const auto& f : from) rep.steps_from += (rep.steps_from.empty() ? "" : " / ") + f;
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
    a->straggler = static_cast<int>(s);
    a->straggler_work_s = work[s];
    a->imbalance = imb;
    a->others_data_s = Median(od);
    a->others_compute_s = Median(oc);
    }

    // Input: the rank whose input costs most (its loader decides the advice).
    const Fractions& B = rep.breakdown;
    a->worst_data = &rep.ranks[0];
    for (const auto& r : rep.ranks) {
      double u = r.gpu ? r.f.idle_data : r.f.data_wait;
      double w = a->worst_data->gpu ? a->worst_data->f.idle_data : a->worst_data->f.data_wait;
      if (u > w) a->worst_data = &r;
    }
    a->input_score = rep.gpu ? B.idle_data + B.h2d + B.idle_copy : B.data_wait;

    // Exposed communication a rank would keep with balanced ranks: the least any rank has
    // (the TensorBoard plugin splits each collective the same way: the minimum across
    // ranks is the transfer, the rest is waiting for the others).
    a->comm_transfer = B.comm;
    if (rep.ranks.size() >= 2 && rep.step_s > 0) {
      double lo = 1e300;
      for (const auto& r : rep.ranks) lo = std::min(lo, r.f.comm * r.step_s_mean);
      a->comm_transfer = std::min(B.comm, lo / rep.step_s);
    }
    for (const auto& t : a->in->traces) a->world_size = std::max(a->world_size, t.world_size);
  }
  for (const auto& g : rep.gpu_logs) {
    if (!std::isnan(g.util_mean)) {
      a->util_mean = std::isnan(a->util_mean) ? g.util_mean : std::min(a->util_mean, g.util_mean);
      a->any_util = true;
    }
    if (!std::isnan(g.throttled_busy_frac)) {
      a->throttled = std::max(a->throttled, g.throttled_busy_frac);
    }
  }
}

Result<Report> Diagnose(const DoctorInputs& in) {
  const Thresholds& th = in.options.thresholds;
  Report rep;
  rep.batch_size = in.options.batch_size;
  rep.notes = in.notes;
  for (const auto& t : in.traces) {
    if (!t.steps_note.empty()) {
      rep.notes.push_back(fmt::format("{}: {}.", t.path, t.steps_note));
    }
  }
  if (in.traces.empty() && in.gpu_logs.empty() && in.pipelines.empty() &&
      in.ray_stats.empty()) {
    return InvalidArgument("nothing to diagnose: give a trace, a GPU log, pipeline metrics or "
                           "Ray Data stats");
  }
  for (const auto& t : in.traces) rep.inputs.push_back(t.path + " (trace, " + t.format + ")");
  for (const auto& l : in.gpu_logs) rep.inputs.push_back(l.path + " (" + l.format + ")");
  for (const auto& p : in.pipelines) rep.inputs.push_back(p.path + " (stoker pipeline metrics)");
  for (const auto& r : in.ray_stats) rep.inputs.push_back(r.path + " (Ray Data stats)");

  // 1. Per-input analyses and the shared context.
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
  if (!in.ray_stats.empty()) {
    rep.ray = AnalyzeRay(in.ray_stats.back());
    if (in.ray_stats.size() > 1) {
      rep.notes.push_back(fmt::format("{} Ray Data stats files given: the last ({}) is "
                                      "diagnosed.",
                                      in.ray_stats.size(), in.ray_stats.back().path));
    }
  }
  Analysis a;
  a.in = &in;
  a.th = &th;
  a.rep = &rep;
  BuildAnalysis(&a);

  // 2. The finding rules, in table order.
  std::vector<Finding> F;
  auto run = [&](RuleScope scope, const GpuLogReport* log) {
    for (const Rule& rule : Rules()) {
      if (rule.scope != scope) continue;
      if (auto f = rule.fn(a, log)) F.push_back(std::move(*f));
    }
  };
  if (rep.has_trace) run(RuleScope::kTrace, nullptr);
  for (const auto& g : rep.gpu_logs) run(RuleScope::kGpuLog, &g);
  if (rep.pipeline) run(RuleScope::kPipeline, nullptr);
  if (rep.ray) run(RuleScope::kRay, nullptr);
  AddInputNotes(a);

  // 3. The verdict, and the rules that follow from it.
  SelectVerdict(a);
  run(RuleScope::kVerdict, nullptr);

  // 4. Findings by expected gain, then severity; the summary.
  std::stable_sort(F.begin(), F.end(), [](const Finding& x, const Finding& y) {
    double gx = x.expected_speedup.value_or(1.0), gy = y.expected_speedup.value_or(1.0);
    if (std::abs(gx - gy) > 1e-9) return gx > gy;
    return SeverityRank(x.severity) < SeverityRank(y.severity);
  });
  rep.findings = std::move(F);
  WriteSummary(a);
  AddVerdictNotes(a);
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

Result<DoctorInputs> LoadInputs(Env* env, const std::vector<std::string>& paths,
                                const LoadOptions& opts) {
  STOKER_ASSIGN_OR_RETURN(telemetry::Inputs t, telemetry::ReadInputs(env, paths, opts));
  DoctorInputs in;
  in.traces = std::move(t.traces);
  in.gpu_logs = std::move(t.gpu_logs);
  in.pipelines = std::move(t.pipelines);
  in.ray_stats = std::move(t.ray_stats);
  in.notes = std::move(t.notes);
  return in;
}

}  // namespace stoker::doctor
