#include "doctor/watch_rules.h"

#include <algorithm>
#include <numeric>

namespace stoker::doctor {

namespace {

constexpr double kBusy = 0.7;          // cores of demand for a busy loading process
constexpr double kMainBusy = 0.8;      // ... for a busy main process
constexpr double kFreeCores = 0.75;    // spare cores that another worker could use
constexpr double kDiskWait = 0.20;     // share of samples in state D
constexpr double kIowait = 0.10;       // machine-wide iowait share
constexpr double kMajflt = 50;         // major faults per second

std::string Pct(double f) { return fmt::format("{:.0f}%", f * 100); }
std::string Ms(double s) {
  if (s >= 10) return fmt::format("{:.1f} s", s);
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 0.01) return fmt::format("{:.0f} ms", s * 1e3);
  return fmt::format("{:.1f} ms", s * 1e3);
}
std::string Cores(double c) { return std::isnan(c) ? "?" : fmt::format("{:.2f}", c); }

bool Known(double v) { return !std::isnan(v); }

// How busy the processes that load batches are: the main process with num_workers=0,
// else the workers, per worker. NaN when not measured.
double LoaderDemandEach(const ProbeFacts& p) {
  double ranks = static_cast<double>(std::max<size_t>(1, p.ranks.size()));
  if (p.num_workers == 0) return (Known(p.main_demand) ? p.main_demand : p.main_cores) / ranks;
  if (p.num_workers < 0) return NAN;
  double d = Known(p.worker_demand) ? p.worker_demand : p.worker_cores;
  int n = p.worker_pids > 0 ? p.worker_pids : p.num_workers * std::max<int>(1, p.ranks.size());
  return Known(d) && n > 0 ? d / n : NAN;
}

double FreeCores(const ProbeFacts& p) {
  double used = Known(p.tree_demand) ? p.tree_demand
                                     : (Known(p.main_cores) ? p.main_cores : 0) +
                                           (Known(p.worker_cores) ? p.worker_cores : 0);
  return Known(p.cpus) ? p.cpus - used : NAN;
}

double LoaderDiskWait(const ProbeFacts& p) {
  return p.num_workers == 0 ? p.main_disk_wait_frac : p.worker_disk_wait_frac;
}

bool StorageSigns(const ProbeFacts& p) {
  double dw = LoaderDiskWait(p);
  return (Known(dw) && dw >= kDiskWait) || (Known(p.iowait_frac) && p.iowait_frac >= kIowait) ||
         (Known(p.majflt_per_s) && p.majflt_per_s >= kMajflt);
}

// The share of the CPU it wanted that the job got (NaN when not measured).
double GotShare(const ProbeFacts& p) {
  if (!Known(p.tree_demand) || !Known(p.main_cores) || p.tree_demand <= 0.3) return NAN;
  return (p.main_cores + (Known(p.worker_cores) ? p.worker_cores : 0)) / p.tree_demand;
}

bool Contended(const ProbeFacts& p) {
  double share = GotShare(p);
  return Known(share) && share < 0.6 && Known(p.machine_busy_cores) && Known(p.cpus) &&
         p.machine_busy_cores >= p.cpus - 0.25;
}

bool Waits(const ProbeFacts& p, const Thresholds& th) {
  return !p.ranks.empty() && p.wait_frac() >= th.input_warn;
}

std::string Severity(const ProbeFacts& p, const Thresholds& th) {
  return p.wait_frac() >= th.input_verdict ? "high" : "medium";
}

std::string LoaderWho(const ProbeFacts& p) {
  if (p.num_workers == 0) return "the training process itself (num_workers=0)";
  return fmt::format("{} worker{}", p.num_workers, p.num_workers == 1 ? "" : "s");
}

// Per-step times summed over ranks: (wait, rest of the step), per step.
std::pair<double, double> PerStep(const ProbeFacts& p) {
  double w = 0, s = 0;
  size_t n = 0;
  for (const auto& r : p.ranks) w += r.wait_s, s += r.step_s, n += r.steps.size();
  if (n == 0) return {0, 0};
  return {w / n, (s - w) / n};
}

}  // namespace

double ProbeFacts::wait_frac() const {
  double w = 0, s = 0;
  for (const auto& r : ranks) w += r.wait_s, s += r.step_s;
  return s > 0 ? w / s : 0;
}

double ProbeFacts::step_s() const {
  double s = 0;
  size_t n = 0;
  for (const auto& r : ranks) s += r.step_s, n += r.steps.size();
  return n > 0 ? s / n : 0;
}

std::optional<Finding> RuleTooFewWorkers(const ProbeFacts& p, const Thresholds& th) {
  double each = LoaderDemandEach(p), free = FreeCores(p);
  if (!Waits(p, th) || !Known(each) || !Known(free) || each < kBusy || free < kFreeCores)
    return std::nullopt;
  auto [wait, rest] = PerStep(p);
  int n = std::max(p.num_workers, 0);
  // Loading one batch takes about `load` of one core: with N busy workers a batch arrives
  // every load / N; the loop needs one every `rest`.
  double load = n == 0 ? wait : n * (wait + rest);
  int need = static_cast<int>(std::ceil(load / std::max(rest, 1e-6) - 1e-9));
  // The training process mostly waits while input-bound: every core can take a worker.
  int cap = Known(p.cpus) ? std::max(1, static_cast<int>(p.cpus)) : need;
  int suggest = std::clamp(need, n + 1, std::max(n + 1, cap));
  Finding f;
  f.id = "input.too_few_workers";
  f.severity = Severity(p, th);
  f.title = "Too few DataLoader workers: the loading is CPU-bound on too few cores";
  f.evidence = fmt::format(
      "The batches are loaded by {}, each busy ({} cores of demand each); the job leaves {} "
      "of {} cores free. Loading takes about {} of one core per batch against {} for the "
      "rest of the step.",
      LoaderWho(p), Cores(each), Cores(free), Cores(p.cpus), Ms(load), Ms(rest));
  f.fix = fmt::format(
      "Set num_workers={} (about {} per batch / {} per step{}), persistent_workers=True and "
      "prefetch_factor=2-4; then run stoker watch again.",
      suggest, Ms(load), Ms(rest),
      suggest < need ? fmt::format(", capped at the {} cores", Cores(p.cpus)) : "");
  double step = wait + rest;
  double new_step = std::max(rest, load / suggest);
  f.expected_speedup = step > 0 && new_step > 0 ? std::max(1.0, step / new_step) : 1.0;
  return f;
}

std::optional<Finding> RuleWorkersCpuBound(const ProbeFacts& p, const Thresholds& th) {
  double each = LoaderDemandEach(p), free = FreeCores(p);
  if (!Waits(p, th) || !Known(each) || !Known(free) || each < kBusy || free >= kFreeCores)
    return std::nullopt;
  Finding f;
  f.id = "input.workers_cpu_bound";
  f.severity = Severity(p, th);
  f.title = "The loading is CPU-bound: the loaders use every core";
  f.evidence = fmt::format(
      "The batches are loaded by {}, each busy ({} cores of demand each); the job uses {} of "
      "{} cores{}.",
      LoaderWho(p), Cores(each), Cores(Known(p.tree_demand) ? p.tree_demand : p.cpus - free),
      Cores(p.cpus),
      p.saturated_cores >= 0 ? fmt::format(" ({} core{} at >= 90%)", p.saturated_cores,
                                           p.saturated_cores == 1 ? "" : "s")
                             : "");
  f.fix = "More workers will not help: there is no core for them. Make each sample cheaper: "
          "decode at reduced size (DCT scaling), store smaller images or a faster format "
          "(stoker convert), move augmentation to the GPU (DALI, torchvision.transforms.v2 on "
          "CUDA tensors), or use the stoker pipeline (C++ threads, no per-sample Python).";
  return f;
}

std::optional<Finding> RuleStorage(const ProbeFacts& p, const Thresholds& th) {
  double each = LoaderDemandEach(p);
  if (!Waits(p, th) || !Known(each) || each >= kBusy || !StorageSigns(p)) return std::nullopt;
  Finding f;
  f.id = "input.storage";
  f.severity = Severity(p, th);
  f.title = "Storage holds the loading back: the loaders wait for reads, not for a CPU";
  double dw = LoaderDiskWait(p);
  f.evidence = fmt::format(
      "The batches are loaded by {}, which use only {} cores of demand each;{}{}{}{}",
      LoaderWho(p), Cores(each),
      Known(dw) ? fmt::format(" they are in disk wait (state D) in {} of the samples;", Pct(dw))
                : "",
      Known(p.iowait_frac) ? fmt::format(" the machine spends {} of its CPU time in iowait;",
                                         Pct(p.iowait_frac))
                           : "",
      Known(p.majflt_per_s) ? fmt::format(" {:.0f} major page faults/s;", p.majflt_per_s) : "",
      Known(p.read_mib_s) ? fmt::format(" reads {:.1f} MiB/s.", p.read_mib_s) : "");
  f.fix = "Read less or read faster: a local NVMe copy or cache of the dataset, larger "
          "sequential shards instead of many small files (stoker convert), more reads in "
          "flight (more workers do help when each waits on I/O), and check `stoker bench io` "
          "against the storage's limit.";
  return f;
}

std::optional<Finding> RuleMainProcess(const ProbeFacts& p, const Thresholds& th) {
  double each = LoaderDemandEach(p);
  double main = Known(p.main_demand) ? p.main_demand : p.main_cores;
  // On a contended machine the training process's demand is mostly waiting for a CPU after
  // each wake-up: that is input.cpu_contention, not this.
  if (!Waits(p, th) || p.num_workers <= 0 || !Known(each) || each >= kBusy || StorageSigns(p) ||
      !Known(main) || main < kMainBusy || Contended(p))
    return std::nullopt;
  Finding f;
  f.id = "input.main_process";
  f.severity = Severity(p, th);
  f.title = "The main process holds the loading back: the workers idle while it is busy";
  f.evidence = fmt::format(
      "The {} workers use only {} cores of demand each, while the training process is busy "
      "({} cores) and still waits {} of each step in DataLoader.__next__.",
      p.num_workers, Cores(each), Cores(main), Pct(p.wait_frac()));
  f.fix = "The time goes to receiving batches in the training process: unpickling large "
          "batches from the worker queues, collate, the pin_memory thread. Return compact "
          "tensors (uint8 images, not float), collate in the workers, keep batches in shared "
          "memory, or use the stoker pipeline (batches built in C++, zero-copy to PyTorch).";
  return f;
}

std::optional<Finding> RuleInputContention(const ProbeFacts& p, const Thresholds& th) {
  if (!Waits(p, th) || !Contended(p)) return std::nullopt;
  for (auto rule : {RuleTooFewWorkers, RuleWorkersCpuBound, RuleStorage, RuleMainProcess})
    if (rule(p, th)) return std::nullopt;
  Finding f;
  f.id = "input.cpu_contention";
  f.severity = Severity(p, th);
  f.title = "Other processes hold the loading back: the job waits for a CPU";
  f.evidence = fmt::format(
      "The job got {} of the CPU time it was ready to use (on a CPU or waiting for one); the "
      "loaders ({}) are not busy on their own, and the training process waits {} of each "
      "step in DataLoader.__next__.",
      Pct(GotShare(p)), LoaderWho(p), Pct(p.wait_frac()));
  f.fix = "Give the job its own cores (taskset, cgroups, the scheduler's CPU request) or "
          "measure on a quiet machine; then run stoker watch again.";
  return f;
}

std::optional<Finding> RuleInputCauseUnknown(const ProbeFacts& p, const Thresholds& th) {
  if (!Waits(p, th)) return std::nullopt;
  for (auto rule : {RuleTooFewWorkers, RuleWorkersCpuBound, RuleStorage, RuleMainProcess,
                    RuleInputContention})
    if (rule(p, th)) return std::nullopt;
  Finding f;
  f.id = "input.cause_unknown";
  f.severity = "low";
  f.title = "The loop waits for data, but the measurements do not say why";
  double each = LoaderDemandEach(p);
  f.evidence = Known(each)
                   ? fmt::format("The loaders ({}) use {} cores of demand each: neither busy "
                                 "nor waiting on storage.",
                                 LoaderWho(p), Cores(each))
                   : "The CPU of the loading processes was not measured (no /proc, or no "
                     "worker PIDs).";
  f.fix = "Record a profiler window (stoker watch --profile-steps 20:30 -- ...) for the "
          "breakdown, or run `stoker tune dataloader` on the Dataset.";
  return f;
}

std::optional<Finding> RuleRankStraggler(const ProbeFacts& p, const Thresholds& th) {
  if (p.ranks.size() < 2) return std::nullopt;
  std::vector<double> w;
  double step = 0;
  for (const auto& r : p.ranks) {
    double n = std::max<size_t>(1, r.steps.size());
    w.push_back(r.wait_s / n);
    step += r.step_s / n;
  }
  step /= static_cast<double>(p.ranks.size());
  size_t s = static_cast<size_t>(std::max_element(w.begin(), w.end()) - w.begin());
  std::vector<double> others;
  for (size_t i = 0; i < w.size(); ++i)
    if (i != s) others.push_back(w[i]);
  std::sort(others.begin(), others.end());
  double med = others.size() % 2 ? others[others.size() / 2]
                                 : 0.5 * (others[others.size() / 2 - 1] + others[others.size() / 2]);
  double excess = w[s] - med;
  if (step <= 0 || excess / step < th.imbalance_verdict / 2) return std::nullopt;
  Finding f;
  f.id = "imbalance.straggler";
  f.rank = p.ranks[s].rank;
  f.severity = excess / step >= th.imbalance_verdict ? "high" : "medium";
  f.title = fmt::format("Rank {} is the straggler: it waits longer for its DataLoader",
                        p.ranks[s].rank);
  f.evidence = fmt::format(
      "Rank {} waits {} per step in DataLoader.__next__, the other ranks {} (median); the "
      "step is {} on every rank, so they wait for rank {} in the collectives ({} of the "
      "step).",
      p.ranks[s].rank, Ms(w[s]), Ms(med), Ms(step), p.ranks[s].rank, Pct(excess / step));
  f.fix = fmt::format(
      "Fix rank {}'s input: its shard of the data (larger or slower samples, a slower disk or "
      "node), its num_workers, or the cores it gets (ranks on one node share them: give each "
      "rank cores / ranks workers).",
      p.ranks[s].rank);
  f.expected_speedup = SpeedupFromRemoving(step, excess);
  return f;
}

std::optional<Finding> RuleCpuSplit(const ProbeFacts& p, const Thresholds& th) {
  if (!Known(p.main_cores) && !Known(p.worker_cores)) return std::nullopt;
  Finding f;
  f.id = "cpu.split";
  f.severity = "info";
  f.title = "Where the job's CPU went (training processes vs DataLoader workers)";
  f.evidence = fmt::format(
      "training process{}: {} cores ({} demand); {} DataLoader worker{}: {} cores ({} demand); "
      "{} cores on the machine{}{}{}.",
      p.ranks.size() > 1 ? "es" : "", Cores(p.main_cores), Cores(p.main_demand), p.worker_pids,
      p.worker_pids == 1 ? "" : "s", Cores(p.worker_cores), Cores(p.worker_demand),
      Cores(p.cpus),
      Known(p.machine_busy_cores) ? fmt::format(", {} busy in all (other processes included)",
                                                Cores(p.machine_busy_cores))
                                  : "",
      Known(p.busiest_core_frac) ? fmt::format("; busiest core {}", Pct(p.busiest_core_frac))
                                 : "",
      Known(p.iowait_frac) ? fmt::format("; iowait {}", Pct(p.iowait_frac)) : "");
  f.fix = "Demand counts time on a CPU plus time waiting for one (schedstat): what the "
          "processes would use on an idle machine.";
  return f;
}

std::optional<Finding> RuleCpuContention(const ProbeFacts& p, const Thresholds& th) {
  if (!Contended(p)) return std::nullopt;
  double got = p.main_cores + (Known(p.worker_cores) ? p.worker_cores : 0);
  double share = GotShare(p);
  Finding f;
  f.id = "cpu.contention";
  f.severity = "medium";
  f.title = "Other processes take the CPU: the job ran on a fraction of the cores it wanted";
  f.evidence = fmt::format(
      "The job wanted {} cores (on a CPU or waiting for one) and got {} ({}); the machine's "
      "{} cores were {} busy.",
      Cores(p.tree_demand), Cores(got), Pct(share), Cores(p.cpus),
      Pct(p.machine_busy_cores / p.cpus));
  f.fix = "Measure on a quiet machine, or give the job its own cores (taskset, cgroups, "
          "the scheduler's CPU request): the timings above include waiting for a CPU.";
  return f;
}

std::optional<Finding> RuleLoaderSettings(const ProbeFacts& p, const Thresholds& th) {
  if (!p.settings_known) return std::nullopt;
  Finding f;
  f.id = "dataloader.settings";
  f.severity = "info";
  f.title = "The training DataLoader's settings";
  f.evidence = fmt::format("num_workers={}, batch_size={}, prefetch_factor={}, "
                           "persistent_workers={}, pin_memory={}",
                           p.num_workers, p.batch_size < 0 ? "None" : std::to_string(p.batch_size),
                           p.num_workers == 0 || p.prefetch_factor < 0
                               ? std::string("n/a")
                               : std::to_string(p.prefetch_factor),
                           p.persistent_workers ? "True" : "False", p.pin_memory ? "True" : "False");
  std::vector<std::string> advice;
  if (p.num_workers > 0 && !p.persistent_workers)
    advice.push_back("persistent_workers=True keeps the workers between epochs (no re-fork and "
                     "no empty queue at each epoch start)");
  if (p.cuda && !p.pin_memory)
    advice.push_back("pin_memory=True with .to(device, non_blocking=True) overlaps the "
                     "host-to-device copy with compute");
  if (advice.empty()) return std::nullopt;
  f.fix = advice[0];
  for (size_t i = 1; i < advice.size(); ++i) f.fix += "; " + advice[i];
  f.fix += ".";
  return f;
}

const std::vector<ProbeRule>& ProbeRules() {
  static const std::vector<ProbeRule> rules = {
      {"input.too_few_workers", RuleTooFewWorkers,
       "wait >= {input_warn}, the loaders (the training process with num_workers=0, else each "
       "worker) busy (>= 0.7 cores of demand), >= 0.75 cores free",
       "suggests num_workers = loading per batch / rest of the step, capped at the cores; gain "
       "step / max(rest, load / workers)"},
      {"input.workers_cpu_bound", RuleWorkersCpuBound, "loaders busy, < 0.75 cores free",
       "make samples cheaper"},
      {"input.storage", RuleStorage,
       "loaders not busy and in disk wait (state D) >= 20% of samples, or iowait >= 10%, or >= "
       "50 major faults/s",
       "storage, shards, cache"},
      {"input.main_process", RuleMainProcess,
       "workers not busy, no storage signs, the training process busy (>= 0.8 cores)",
       "batch transfer, collate, pinning"},
      {"input.cpu_contention", RuleInputContention,
       "none of the above, and the job got < 60% of its demand while the machine was busy",
       "a quiet machine or pinned cores"},
      {"input.cause_unknown", RuleInputCauseUnknown, "wait >= {input_warn} and nothing above",
       "record a profiler window"},
      {"imbalance.straggler", RuleRankStraggler,
       ">= 2 ranks; the rank waiting most for data exceeds the others' median by >= half of "
       "{imbalance_verdict} of the step (high at {imbalance_verdict}, then the verdict is "
       "imbalance without a trace)",
       "that rank's input"},
      {"cpu.contention", RuleCpuContention,
       "the job got < 60% of its demand, machine >= cpus - 0.25 busy", ""},
      {"dataloader.settings", RuleLoaderSettings,
       "persistent_workers=False with workers, or pin_memory=False with CUDA", ""},
      {"cpu.split", RuleCpuSplit, "always when measured (info)", ""},
  };
  return rules;
}

std::string InputCause(const ProbeFacts& p, const Thresholds& th) {
  for (const auto& r : ProbeRules()) {
    std::string id = r.id;
    if (id.rfind("input.", 0) != 0) continue;
    if (r.fn(p, th)) return id;
  }
  return "";
}

namespace {

const char* CauseWords(const std::string& id) {
  if (id == "input.too_few_workers") return "too few workers";
  if (id == "input.workers_cpu_bound") return "workers CPU-bound";
  if (id == "input.storage") return "storage";
  if (id == "input.main_process") return "the main process";
  if (id == "input.cpu_contention") return "other processes take the CPU";
  if (id == "input.cause_unknown") return "cause unknown";
  return "";
}

}  // namespace

Result<Report> DiagnoseWatch(const DoctorInputs& in, const ProbeFacts& probe) {
  const Thresholds& th = in.options.thresholds;
  Report rep;
  bool from_probe = false;
  bool nothing = in.traces.empty() && in.gpu_logs.empty() && in.pipelines.empty();
  if (nothing && probe.ranks.empty()) {
    rep.inputs.push_back("stoker watch probe (no DataLoader steps)");
  } else if (!in.traces.empty() || probe.ranks.empty()) {
    STOKER_ASSIGN_OR_RETURN(rep, Diagnose(in));
  } else {
    std::vector<StepTiming> all;
    for (const auto& r : probe.ranks) all.insert(all.end(), r.steps.begin(), r.steps.end());
    DoctorOptions o = in.options;
    if (o.batch_size == 0 && probe.batch_size > 0) o.batch_size = probe.batch_size;
    if (o.cpus == 0 && Known(probe.cpus)) o.cpus = static_cast<int>(probe.cpus);
    STOKER_ASSIGN_OR_RETURN(rep, DiagnoseSteps(all, o));
    from_probe = true;
    rep.inputs = {fmt::format("stoker watch probe ({} rank{}, {} steps{})", probe.ranks.size(),
                              probe.ranks.size() == 1 ? "" : "s", all.size(),
                              probe.cuda ? ", CUDA events" : ", host clock")};
    rep.ranks.clear();
    for (const auto& r : probe.ranks) {
      if (r.steps.empty()) continue;
      auto one = DiagnoseSteps(r.steps, o);
      if (!one.ok() || one->ranks.empty()) continue;
      RankReport rr = one->ranks[0];
      rr.rank = r.rank;
      rr.path = fmt::format("pid {}", r.pid);
      rr.format = r.gpu_timing ? "probe (CUDA events)" : "probe (host clock)";
      rr.dataloader = probe.num_workers == 0 ? "single-process"
                                             : (probe.num_workers > 0 ? "multi-process" : "");
      rep.ranks.push_back(std::move(rr));
    }
    rep.notes.clear();
    if (!in.gpu_logs.empty()) {  // the samples: GPU/CPU logs and their findings
      DoctorInputs s;
      s.gpu_logs = in.gpu_logs;
      s.options = in.options;
      auto srep = Diagnose(s);
      if (srep.ok()) {
        rep.gpu_logs = srep->gpu_logs;
        for (const auto& i : srep->inputs) rep.inputs.push_back(i);
        for (const auto& f : srep->findings)
          if (f.id.rfind("gpu.", 0) == 0) rep.findings.push_back(f);
      }
    }
    rep.notes.push_back("Verdict from the probe's per-step timings (time in DataLoader.__next__ "
                        "vs the rest of the step); record a profiler window (--profile-steps) "
                        "for the full breakdown (compute, copies, syncs, communication).");
    if (!probe.cuda) {
      rep.notes.push_back("Host clock: with CUDA initialized the probe times the GPU's side "
                          "with CUDA events; this job did not initialize CUDA.");
    }
  }
  bool any_util = false;
  for (const auto& g : rep.gpu_logs) any_util = any_util || !std::isnan(g.util_mean);
  if (!from_probe && !rep.has_trace && !any_util && !rep.pipeline) {
    rep.primary = Verdict::kUnknown;
    rep.confidence = 0;
    std::string seen;
    if (!rep.gpu_logs.empty() && !std::isnan(rep.gpu_logs[0].proc_cpu_cores_mean)) {
      const GpuLogReport& g = rep.gpu_logs[0];
      seen = fmt::format(" The process tree used {:.1f}{} cores on average{}.",
                         g.proc_cpu_cores_mean,
                         std::isnan(g.cpus) ? std::string() : fmt::format(" of {:.0f}", g.cpus),
                         std::isnan(g.read_mib_s_mean)
                             ? std::string()
                             : fmt::format(" and read {:.1f} MiB/s", g.read_mib_s_mean));
    }
    rep.summary = "Unknown: nothing measured says whether the training loop waits for data "
                  "(no GPU samples, no DataLoader steps, no trace)." + seen +
                  " Record next: run a PyTorch DataLoader loop under the probe (on by default), "
                  "or a profiler window (--profile-steps), or on a machine with a GPU.";
  }
  // The probe's rules.
  std::vector<Finding> extra;
  for (const auto& r : ProbeRules()) {
    if (auto f = r.fn(probe, th)) extra.push_back(std::move(*f));
  }
  bool has_straggler = false;
  for (auto& f : extra) {
    if (f.id == "imbalance.straggler") {
      bool dup = std::any_of(rep.findings.begin(), rep.findings.end(),
                             [](const Finding& g) { return g.id == "imbalance.straggler"; });
      if (dup) continue;
      has_straggler = f.severity == "high";
      if (from_probe && has_straggler) {
        rep.primary = Verdict::kImbalance;
        rep.confidence = 0.6;
        rep.summary = fmt::format("Imbalance: rank {} is the straggler, the other ranks wait "
                                  "for it ({}).",
                                  f.rank, f.evidence.substr(0, f.evidence.find(';')));
      }
    }
  }
  // Cause findings first (right after input.dataloader), info findings last.
  auto pos = std::find_if(rep.findings.begin(), rep.findings.end(),
                          [](const Finding& f) { return f.id == "input.dataloader"; });
  size_t at = pos == rep.findings.end() ? 0 : static_cast<size_t>(pos - rep.findings.begin()) + 1;
  for (auto& f : extra) {
    if (f.id == "imbalance.straggler" &&
        std::any_of(rep.findings.begin(), rep.findings.end(),
                    [](const Finding& g) { return g.id == "imbalance.straggler"; }))
      continue;
    if (f.severity == "info") {
      rep.findings.push_back(std::move(f));
    } else {
      rep.findings.insert(rep.findings.begin() + static_cast<ptrdiff_t>(at++), std::move(f));
    }
  }
  std::string cause = InputCause(probe, th);
  if (!cause.empty() && cause != "input.cause_unknown") {
    // One fix per cause: the generic DataLoader advice points at the cause's finding.
    for (auto& f : rep.findings) {
      if (f.id != "input.dataloader") continue;
      for (const auto& g : rep.findings)
        if (g.id == cause)
          f.fix = "The cause, from the probe's CPU attribution, is the next finding: " + g.title +
                  ".";
    }
  }
  if (rep.primary == Verdict::kInputBound && !cause.empty()) {
    rep.summary += fmt::format(" Cause: {}.", CauseWords(cause));
  }
  for (const auto& n : probe.notes) rep.notes.push_back(n);
  return rep;
}

std::string StatusLine(const Report& r) {
  std::string cause;
  for (const auto& f : r.findings) {
    std::string w = CauseWords(f.id);
    if (!w.empty()) {
      cause = w;
      break;
    }
  }
  std::string s = VerdictName(r.primary);
  if (r.primary == Verdict::kInputBound && !cause.empty()) s += " (" + cause + ")";
  if (r.primary == Verdict::kImbalance) {
    for (const auto& f : r.findings)
      if (f.id == "imbalance.straggler") s += fmt::format(" (rank {})", f.rank);
  }
  return s;
}

}  // namespace stoker::doctor
