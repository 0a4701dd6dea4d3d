// The verdict: every cause's score against its threshold (Causes()), the choice and its
// confidence (SelectVerdict), and the one-sentence summary (WriteSummary).
#include <algorithm>
#include <cmath>

#include "doctor/analysis.h"
#include "doctor/text.h"

namespace stoker::doctor {

namespace {

std::optional<Candidate> Imbalance(const Analysis& a) {
  if (a.rep->ranks.size() < 2) return std::nullopt;
  return Candidate{Verdict::kImbalance, a.imbalance, a.th->imbalance_verdict};
}

std::optional<Candidate> TraceInput(const Analysis& a) {
  if (!a.has_trace()) return std::nullopt;
  return Candidate{Verdict::kInputBound, a.input_score, a.th->input_verdict};
}

std::optional<Candidate> TraceComm(const Analysis& a) {
  if (!a.has_trace()) return std::nullopt;
  return Candidate{Verdict::kCommunicationBound, a.comm_transfer, a.th->comm_verdict};
}

std::optional<Candidate> TraceHost(const Analysis& a) {
  if (!a.has_trace()) return std::nullopt;
  const Fractions& B = a.B();
  return Candidate{Verdict::kHostBound, a.gpu() ? B.idle_host + B.idle_sync : B.idle,
                   a.th->host_verdict};
}

std::optional<Candidate> Throttle(const Analysis& a) {
  if (a.rep->gpu_logs.empty()) return std::nullopt;
  return Candidate{Verdict::kThrottled, a.throttled, a.th->throttle_verdict};
}

// No trace: utilization alone says the GPU waits, not on what. The score is the larger of
// the mean idle share and the most starved GPU's starved share.
std::optional<Candidate> LogUtilization(const Analysis& a) {
  if (a.rep->gpu_logs.empty() || a.has_trace() || std::isnan(a.util_mean)) return std::nullopt;
  double starved = 0;
  for (const auto& g : a.rep->gpu_logs) starved = std::max(starved, g.starved_gpu_frac);
  return Candidate{Verdict::kInputBound, std::max(1.0 - a.util_mean / 100.0, starved),
                   1.0 - a.th->low_util};
}

std::optional<Candidate> PipelineWait(const Analysis& a) {
  if (!a.rep->pipeline || a.has_trace()) return std::nullopt;
  return Candidate{Verdict::kInputBound, a.rep->pipeline->consumer_wait_frac,
                   a.th->input_verdict};
}

// Ray Data stats with the iterator's breakdown: the training loop's wait in iter_batches
// after its first batch, against that plus its own code.
std::optional<Candidate> RayWait(const Analysis& a) {
  if (!a.rep->ray || a.has_trace() || std::isnan(a.rep->ray->consumer_wait_frac)) {
    return std::nullopt;
  }
  return Candidate{Verdict::kInputBound, a.rep->ray->consumer_wait_frac, a.th->input_verdict};
}

// The consumer's share of its own time when no trace or GPU log says more (pipeline
// metrics say nothing of the consumer's work; Ray's iterator breakdown does).
double RayUserShare(const Analysis& a) {
  const auto& r = a.rep->ray;
  if (!r || std::isnan(r->consumer_wait_frac)) return NAN;
  return 1.0 - r->consumer_wait_frac;
}

}  // namespace

const std::vector<Cause>& Causes() {
  // clang-format off
  static const std::vector<Cause> kCauses = {
    {Verdict::kImbalance, "traces of >= 2 ranks", "straggler excess / mean step",
     "{imbalance_verdict}", "stoker", &Imbalance},
    {Verdict::kInputBound, "a trace",
     "GPU: idle_data + h2d + idle_copy; CPU-only: data_wait", "{input_verdict}",
     "TensorFlow input-pipeline analyzer: >= 20% \"HIGHLY input-bound\"", &TraceInput},
    {Verdict::kCommunicationBound, "a trace",
     "exposed communication (of the rank with least, with >= 2 ranks)", "{comm_verdict}",
     "TensorBoard plugin R4: communication / step > 10%", &TraceComm},
    {Verdict::kHostBound, "a trace", "GPU: idle_host + idle_sync; CPU-only: idle",
     "{host_verdict}", "TensorFlow: kernel-launch / all-other time >= 15% \"high\"",
     &TraceHost},
    {Verdict::kThrottled, "GPU logs", "busy samples with power/thermal throttle bits",
     "{throttle_verdict}", "stoker", &Throttle},
    {Verdict::kInputBound, "GPU logs, no trace",
     "max(1 - mean utilization, the most starved GPU's starved share)", "1 - {low_util}",
     "TensorBoard plugin R5, Nsight Systems gpu_time_util", &LogUtilization},
    {Verdict::kInputBound, "pipeline metrics, no trace", "consumer_wait_frac",
     "{input_verdict}", "TensorFlow input-pipeline analyzer", &PipelineWait},
    {Verdict::kInputBound, "Ray Data stats with the iterator breakdown, no trace",
     "blocked in iter_batches after the first batch / (that + user code)", "{input_verdict}",
     "TensorFlow input-pipeline analyzer", &RayWait},
  };
  // clang-format on
  return kCauses;
}

std::vector<CauseInfo> ListCauses(const Thresholds& th) {
  std::vector<CauseInfo> out;
  for (const Cause& c : Causes()) {
    out.push_back({VerdictName(c.verdict), c.applies, c.score, FillThresholds(c.threshold, th),
                   c.source});
  }
  // When no cause reaches its threshold (SelectVerdict).
  out.push_back({"compute_bound", "no cause at its threshold",
                 "compute (GPU logs only: mean utilization; Ray Data stats only: user code "
                 "share of the loop)",
                 FillThresholds("compute >= {compute_bound} and data_wait < {input_warn}", th),
                 "stoker; 5% is TensorBoard plugin R1"});
  out.push_back({"healthy", "no cause at its threshold", "(no single bottleneck; smaller "
                 "findings may remain)", "", ""});
  out.push_back({"unknown", "no evidence: no trace with steps, no GPU utilization sample, no "
                 "pipeline metrics, no Ray Data iterator breakdown (e.g. stoker watch without "
                 "a GPU)",
                 "(nothing is scored; the report says what to record next)", "", ""});
  return out;
}

void SelectVerdict(const Analysis& a) {
  Report& rep = *a.rep;
  const Thresholds& th = *a.th;
  const Fractions& B = a.B();
  std::vector<Candidate> cands;
  for (const auto& cause : Causes()) {
    if (auto c = cause.fn(a)) cands.push_back(*c);
  }
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
      rep.has_trace ? B.compute : (std::isnan(a.util_mean) ? 0 : a.util_mean / 100.0);
  double wait_share = B.data_wait;
  if (!rep.has_trace && std::isnan(a.util_mean) && !std::isnan(RayUserShare(a))) {
    compute_share = RayUserShare(a);
    wait_share = rep.ray->consumer_wait_frac;
  }
  if (!a.evidence()) {
    // Nothing says where the time goes (host samples only, no step measured): neither a
    // bottleneck nor its absence can be claimed.
    rep.primary = Verdict::kUnknown;
    rep.confidence = 0;
    return;
  }
  if (best != nullptr) {
    rep.primary = best->v;
    double c = 0.55 + 0.35 * std::min(1.0, best->norm() - 1.0);
    if (runner != nullptr && runner->score >= runner->threshold &&
        runner->norm() >= 0.8 * best->norm()) {
      c -= 0.2;
    }
    if (rep.has_trace && rep.steps < 3) c -= 0.15;
    // Iterations guessed from GPU idle gaps may split or merge real steps.
    if (rep.steps_from.find("GPU kernel bursts") != std::string::npos) c -= 0.1;
    // Exposed communication of a subset of the ranks mixes transfer with waiting for the
    // ranks not shown.
    if (best->v == Verdict::kCommunicationBound &&
        a.world_size > static_cast<int>(rep.ranks.size())) {
      c -= 0.15;
    }
    if (!rep.has_trace) c -= 0.2;
    rep.confidence = std::clamp(c, 0.2, 0.98);
  } else if (compute_share >= th.compute_bound && wait_share < th.input_warn) {
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
  if (rep.pipeline && !rep.has_trace && rep.gpu_logs.empty() &&
      rep.pipeline->consumer_wait_frac >= 0.95) {
    rep.confidence = std::min(rep.confidence, 0.5);  // a benchmark says nothing of the model
  }
  if (rep.ray && !rep.pipeline && !rep.has_trace && rep.gpu_logs.empty() &&
      rep.ray->consumer_wait_frac >= 0.95) {
    rep.confidence = std::min(rep.confidence, 0.5);  // the same for a loop that drained Ray
  }
}

std::string RecordNext(const Analysis& a) {
  if (a.rep->ray && !a.rep->ray->iterator && !a.has_trace() && a.rep->gpu_logs.empty()) {
    return "Record next: the iterator's breakdown, which says whether the training loop "
           "waited on Ray Data: after an epoch, ds._get_stats_summary().to_string() (Ray "
           "2.60's ds.stats() leaves it out when the dataset was consumed with iter_batches), "
           "or stoker.ray.diagnose(ds).";
  }
  return "Record next: a profiler trace of a few training steps (torch.profiler with "
         "schedule=... and prof.step(), or stoker watch --trace DIR) for the breakdown" +
         std::string(a.rep->gpu_logs.empty() || a.any_util
                         ? ""
                         : ", and GPU samples where the job trains on the GPU (nvidia-smi "
                           "--query-gpu=... or stoker watch on that machine)") +
         ".";
}

void WriteSummary(const Analysis& a) {
  Report& rep = *a.rep;
  const Fractions& B = a.B();
  const double util_mean = a.util_mean, throttled = a.throttled;
  const double compute_share =
      rep.has_trace ? B.compute : (std::isnan(util_mean) ? 0 : util_mean / 100.0);
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
                                         Pct(B.idle_data + B.h2d + B.idle_copy), step,
                                         Pct(B.idle_data), Pct(B.h2d + B.idle_copy),
                                         B.idle_data >= B.h2d + B.idle_copy
                                             ? top_gain("input.dataloader")
                                             : top_gain("h2d.pageable") + top_gain("h2d.exposed"))
                                   : fmt::format("Input-bound: {} of each {} step waits for the "
                                                 "DataLoader{}.",
                                                 Pct(B.data_wait), step,
                                                 top_gain("input.dataloader")))
                        : (rep.ray && !rep.pipeline && rep.gpu_logs.empty() &&
                           !std::isnan(rep.ray->consumer_wait_frac))
                        ? fmt::format("Input-bound: the training loop waits {} of its time for "
                                      "Ray Data (blocked in iter_batches {} after the first "
                                      "batch, its own code {}){}.",
                                      Pct(rep.ray->consumer_wait_frac), Ms(rep.ray->wait_s),
                                      Ms(rep.ray->user_s),
                                      rep.ray->bottleneck >= 0
                                          ? fmt::format("; operator '{}' does {} of Ray Data's "
                                                        "work",
                                                        rep.ray->ops[rep.ray->bottleneck].name,
                                                        Pct(rep.ray->ops[rep.ray->bottleneck]
                                                                .share))
                                          : std::string())
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
      if (!rep.has_trace && std::isnan(util_mean) && rep.ray &&
          !std::isnan(rep.ray->consumer_wait_frac)) {
        rep.summary = fmt::format(
            "Consumer-bound: the training loop's own code takes {} of its time ({}) and Ray "
            "Data keeps up (blocked {} after the first batch).",
            Pct(1.0 - rep.ray->consumer_wait_frac), Ms(rep.ray->user_s), Ms(rep.ray->wait_s));
        break;
      }
      rep.summary = fmt::format("Compute-bound: compute fills {} of the {} step and the input "
                                "pipeline keeps up.",
                                rep.has_trace ? Pct(B.compute) : Pct(compute_share),
                                rep.has_trace ? step : std::string("sampled"));
      break;
    case Verdict::kCommunicationBound:
      rep.summary = fmt::format("Communication-bound: {} of each {} step is exposed "
                                "communication{}.",
                                Pct(B.comm), step, top_gain("comm.exposed"));
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
                                          Pct(B.idle_host + B.idle_sync), step,
                                          Pct(B.idle_host), Pct(B.idle_sync))
                            : fmt::format("Host-bound: {} of each {} step is spent outside "
                                          "operators (Python overhead).",
                                          Pct(B.idle), step);
      break;
    case Verdict::kThrottled:
      rep.summary = fmt::format("Throttled: the GPU clocks are throttled in {} of busy samples.",
                                Pct(throttled));
      break;
    case Verdict::kUnknown:
      rep.summary = "Unknown: nothing in these inputs shows where the time goes. " + RecordNext(a);
      break;
    case Verdict::kHealthy:
      if (!rep.has_trace && std::isnan(util_mean) && rep.ray &&
          !std::isnan(rep.ray->consumer_wait_frac)) {
        rep.summary = fmt::format("Healthy: the training loop waits {} of its time for Ray "
                                  "Data after the first batch; its own code takes the rest.",
                                  Pct(rep.ray->consumer_wait_frac));
        break;
      }
      rep.summary = rep.has_trace
                        ? fmt::format("Healthy: no single bottleneck; DataLoader wait {}, "
                                      "compute {} of the {} step.",
                                      Pct(B.data_wait), Pct(B.compute), step)
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
  if (rep.primary == Verdict::kUnknown && rep.has_trace) {
    rep.summary = "Unknown: the traces have no step to break down. " + RecordNext(a);
  } else if (rep.primary == Verdict::kUnknown && !rep.gpu_logs.empty()) {
    // Host samples only (stoker watch without a GPU or driver): say what was seen.
    const GpuLogReport& g = rep.gpu_logs.front();
    rep.summary = "Unknown: no GPU samples (no GPU or driver while sampling): nothing can be "
                  "said about GPU starvation";
    if (!std::isnan(g.proc_cpu_cores_mean)) {
      rep.summary += fmt::format("; the process tree used {:.1f}{} cores on average",
                                 g.proc_cpu_cores_mean,
                                 std::isnan(g.cpus) ? std::string()
                                                    : fmt::format(" of {:.0f}", g.cpus));
      if (!std::isnan(g.read_mib_s_mean)) {
        rep.summary += fmt::format(" and read {:.1f} MiB/s from disk", g.read_mib_s_mean);
      }
    }
    rep.summary += ". " + RecordNext(a);
  }
}

void AddRayNotes(const Analysis& a);

void AddInputNotes(const Analysis& a) {
  Report& rep = *a.rep;
  AddRayNotes(a);
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
}

void AddRayNotes(const Analysis& a) {
  Report& rep = *a.rep;
  if (!rep.ray || rep.has_trace || !rep.gpu_logs.empty()) return;
  const RayReport& y = *rep.ray;
  if (y.consumer_wait_frac >= 0.95) {
    rep.notes.push_back(fmt::format(
        "The loop over the Ray dataset did almost no work of its own ({} against {} blocked): "
        "it drained Ray Data like a benchmark, so the verdict is about Ray Data's capacity{}; "
        "compare it with what the training step consumes.",
        Ms(y.user_s), Ms(y.wait_s),
        std::isnan(y.rows_per_s) ? std::string()
                                 : fmt::format(" ({:.1f} rows/s)", y.rows_per_s)));
  }
}

void AddVerdictNotes(const Analysis& a) {
  Report& rep = *a.rep;
  if (!rep.gpu_logs.empty() && !a.any_util) {
    rep.notes.push_back("The GPU logs have no GPU utilization samples (no GPU or driver while "
                        "sampling): CPU and I/O only.");
  }
  if (rep.has_trace && !rep.gpu) {
    rep.notes.push_back("The trace has no GPU events: CPU-side analysis only.");
  }
}

}  // namespace stoker::doctor
