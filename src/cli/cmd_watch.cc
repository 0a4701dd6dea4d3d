// stoker watch [--out samples.csv] [--interval 0.1] [--trace DIR] [--no-probe]
//              [--profile-steps A:B | --profile-after 30s] -- <command> [args...]
//
// Runs the command in its own process group, samples the GPUs (NVML, loaded with dlopen)
// and the process tree's CPU and disk I/O (/proc) about ten times a second, and puts
// stoker's probe into every Python process of the job (python/stoker/_boot on PYTHONPATH):
// per-step DataLoader wait, the loader's settings and worker PIDs, and on request a
// torch.profiler window. Shows a live status line with the doctor's verdict so far,
// forwards Ctrl-C/SIGTERM to the command, and at exit prints the doctor's verdict on the
// probe, the samples and any traces (src/doctor/watch_rules.h), and keeps the samples as a
// CSV that `stoker doctor` reads later. Exits with the command's exit status.
#include <cstdint>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "cli/commands.h"
#include "cli/python_side.h"
#include "doctor/doctor.h"
#include "doctor/render.h"
#include "doctor/watch_rules.h"
#include "io/env.h"
#include "telemetry/probe_log.h"
#include "telemetry/sampler.h"

namespace stoker::cli {

namespace {

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal.store(sig); }

struct WatchFlags {
  std::vector<std::string> command;
  std::string out = "stoker-watch.csv";
  double interval = 0.1;
  std::vector<std::string> traces;
  std::string json, html, md;
  int batch_size = 0;
  bool no_gpu = false;
  bool no_probe = false;
  std::string profile_steps, profile_after;
  int max_findings = 6;
};

// "--profile-steps 50:60" -> "steps:50:60"; "--profile-after 30s" -> "after:30:10".
Result<std::string> ProfileSpec(const WatchFlags& f) {
  if (!f.profile_steps.empty() && !f.profile_after.empty())
    return InvalidArgument("give --profile-steps or --profile-after, not both");
  if (!f.profile_steps.empty()) {
    int a = 0, b = 0;
    char tail = 0;
    if (std::sscanf(f.profile_steps.c_str(), "%d:%d%c", &a, &b, &tail) != 2 || a < 1 || b <= a ||
        b - a > 10000)
      return InvalidArgument("--profile-steps wants A:B with 1 <= A < B (steps counted from 0, "
                             "B not included), got '{}'",
                             f.profile_steps);
    return fmt::format("steps:{}:{}", a, b);
  }
  if (!f.profile_after.empty()) {
    double s = -1;
    char unit[8] = {0};
    int n = std::sscanf(f.profile_after.c_str(), "%lf%7s", &s, unit);
    std::string u = n == 2 ? unit : "s";
    if (n < 1 || s < 0 || !(u == "s" || u == "m" || u == "ms"))
      return InvalidArgument("--profile-after wants seconds (30, 30s, 2m, 500ms), got '{}'",
                             f.profile_after);
    if (u == "m") s *= 60;
    if (u == "ms") s /= 1000;
    return fmt::format("after:{}:10", s);
  }
  return std::string();
}

std::string Absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char buf[4096];
  if (::getcwd(buf, sizeof(buf)) == nullptr) return p;
  return std::string(buf) + "/" + p;
}

// The probe's folder beside the samples: <out minus .csv>.probe/, emptied of old reports.
Result<std::string> ProbeDir(const std::string& out) {
  std::string base = out;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".csv") == 0)
    base.resize(base.size() - 4);
  std::string dir = Absolute(base + ".probe");
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return IOError("cannot create {}: {}", dir, std::strerror(errno));
  auto names = Env::Default()->ListDir(dir);
  if (names.ok()) {
    for (const auto& e : *names) {
      const std::string& n = e.name;
      bool ours = (n.rfind("probe-", 0) == 0 && n.size() > 6 &&
                   n.compare(n.size() - 6, 6, ".jsonl") == 0) ||
                  (n.rfind("trace-rank", 0) == 0 && n.size() > 5 &&
                   n.compare(n.size() - 5, 5, ".json") == 0);
      if (ours) ::unlink((dir + "/" + n).c_str());
    }
  }
  return dir;
}

// What the probe saw, merged over the job's processes, plus the CPU attribution.
struct ProbeView {
  doctor::ProbeFacts facts;
  std::vector<int> main_pids, worker_pids;
  std::vector<std::string> traces;
  int python_procs = 0, torch_procs = 0;
};

ProbeView Merge(const telemetry::ProbeReader& reader) {
  ProbeView v;
  doctor::ProbeFacts& f = v.facts;
  int next_rank = 0;
  std::set<int> ranks_used;
  for (const auto* p : reader.processes()) {
    if (p->started) ++v.python_procs;
    if (p->torch) ++v.torch_procs;
    for (const auto& t : p->traces) v.traces.push_back(t);
    const telemetry::ProbeLoader* l = p->main_loader();
    if (l == nullptr) continue;
    for (const auto& ld : p->loaders)
      for (int w : ld.worker_pids) v.worker_pids.push_back(w);
    v.main_pids.push_back(p->pid);
    doctor::ProbeRank r;
    r.pid = p->pid;
    r.rank = p->rank >= 0 && !ranks_used.count(p->rank) ? p->rank : -1;
    if (r.rank < 0) {
      while (ranks_used.count(next_rank)) ++next_rank;
      r.rank = next_rank;
    }
    ranks_used.insert(r.rank);
    bool gpu = !l->gpu_wait_s.empty();
    size_t n = l->wait_s.size();
    // The first step (worker start-up, the first batch) is warm-up: not counted.
    for (size_t i = n > 1 ? 1 : 0; i < n; ++i) {
      double w = l->wait_s[i], c = l->compute_s[i];
      if (gpu && i < l->gpu_wait_s.size()) w = l->gpu_wait_s[i], c = l->gpu_step_s[i];
      if (w + c <= 0) continue;
      r.steps.push_back({w, w + c});
      r.wait_s += w;
      r.step_s += w + c;
    }
    r.gpu_timing = gpu;
    f.cuda = f.cuda || gpu;
    if (r.steps.empty()) continue;
    if (!f.settings_known && l->settings) {
      f.settings_known = true;
      f.num_workers = l->num_workers;
      f.prefetch_factor = l->prefetch_factor;
      f.batch_size = l->batch_size;
      f.pin_memory = l->pin_memory;
      f.persistent_workers = l->persistent_workers;
    }
    f.ranks.push_back(std::move(r));
  }
  std::sort(f.ranks.begin(), f.ranks.end(),
            [](const doctor::ProbeRank& a, const doctor::ProbeRank& b) { return a.rank < b.rank; });
  std::sort(v.worker_pids.begin(), v.worker_pids.end());
  v.worker_pids.erase(std::unique(v.worker_pids.begin(), v.worker_pids.end()), v.worker_pids.end());
  f.worker_pids = static_cast<int>(v.worker_pids.size());
  return v;
}

void AddCpu(const telemetry::CpuAttribution& a, doctor::ProbeFacts* f) {
  if (a.duration_s <= 0) return;
  f->cpus = a.cpus;
  f->main_cores = a.main.cores;
  f->main_demand = a.main.demand;
  f->main_disk_wait_frac = a.main.disk_wait_frac;
  if (a.workers.procs > 0) {
    f->worker_cores = a.workers.cores;
    f->worker_demand = a.workers.demand;
    f->worker_disk_wait_frac = a.workers.disk_wait_frac;
  } else if (f->num_workers == 0) {
    f->worker_cores = 0;
    f->worker_demand = 0;
  }
  f->tree_demand = a.tree_demand;
  f->machine_busy_cores = a.machine_busy_cores;
  f->iowait_frac = a.iowait_frac;
  f->busiest_core_frac = a.busiest_core_frac;
  f->saturated_cores = a.saturated_cores;
  double maj = 0;
  for (const auto* r : {&a.main, &a.workers})
    if (!std::isnan(r->majflt_per_s)) maj += r->majflt_per_s;
  f->majflt_per_s = maj;
  f->read_mib_s = a.read_mib_s;
}

// What the probe could not measure, said in the report.
void ProbeNotes(const telemetry::ProbeReader& reader, const ProbeView& v, const std::string& spec,
                bool probe_on, const std::string& probe_off_why, std::vector<std::string>* notes) {
  if (!probe_on) {
    notes->push_back("Probe off (" + probe_off_why + "): no per-step DataLoader timings.");
    return;
  }
  if (v.python_procs == 0) {
    notes->push_back("No Python process of the job loaded the probe: the command is not a "
                     "Python program (or runs Python with -I, -E or -S, which ignore "
                     "PYTHONPATH). Only the process tree's CPU and I/O were measured.");
    return;
  }
  if (v.torch_procs == 0) {
    notes->push_back(fmt::format("{} Python process{} ran under the probe but never imported "
                                 "torch.utils.data: no DataLoader to measure.",
                                 v.python_procs, v.python_procs == 1 ? "" : "es"));
  } else if (v.facts.ranks.empty()) {
    notes->push_back("torch.utils.data was imported but no DataLoader was iterated (or the "
                     "job ended before its first batch).");
  }
  std::set<std::string> chained;
  for (const auto* p : reader.processes()) {
    if (!p->chained_sitecustomize.empty()) chained.insert(p->chained_sitecustomize);
    for (const auto& e : p->errors) notes->push_back(fmt::format("probe (pid {}): {}", p->pid, e));
    for (const auto& e : p->profiler_errors)
      notes->push_back(fmt::format("Profiler window (pid {}): {}", p->pid, e));
    if (p->bad_lines > 0)
      notes->push_back(fmt::format("probe-{}.jsonl: {} unreadable line{} skipped", p->pid,
                                   p->bad_lines, p->bad_lines == 1 ? "" : "s"));
    if (p->main_loader() != nullptr && !p->exited)
      notes->push_back(fmt::format(
          "pid {} ended without the probe's exit record (killed?): up to its last 0.5 s of "
          "steps are missing.",
          p->pid));
  }
  for (const auto& c : chained)
    notes->push_back("The existing sitecustomize (" + c + ") ran before the probe, as it would "
                     "without stoker watch.");
  if (!spec.empty() && v.traces.empty()) {
    bool failed = false;
    for (const auto* p : reader.processes()) failed = failed || !p->profiler_errors.empty();
    if (!failed && v.torch_procs > 0) {
      size_t steps = 0;
      for (const auto& r : v.facts.ranks) steps = std::max(steps, r.steps.size() + 1);
      notes->push_back(fmt::format("The profiler window ({}) was not reached: the job made {} "
                                   "step{}.",
                                   spec, steps, steps == 1 ? "" : "s"));
    }
  }
}

std::string LiveLine(double t, const std::vector<telemetry::GpuSample>& samples,
                     const telemetry::GpuSample& host, const doctor::Report* rep,
                     const ProbeView* v) {
  std::string line = fmt::format("[watch {:.1f}s]", t);
  for (const auto& s : samples) {
    if (s.gpu < 0) continue;
    line += fmt::format(" GPU{} {:.0f}% {:.1f}/{:.0f}G", s.gpu, s.util, s.mem_used_mib / 1024,
                        s.mem_total_mib / 1024);
  }
  if (v != nullptr && !v->facts.ranks.empty()) {
    size_t steps = 0;
    for (const auto& r : v->facts.ranks) steps = std::max(steps, r.steps.size());
    line += fmt::format(" | step {} data wait {:.0f}%", steps, 100 * v->facts.wait_frac());
  }
  if (!std::isnan(host.proc_cpu_cores)) {
    line += fmt::format(" | CPU {:.1f}/{:.0f}", host.proc_cpu_cores, host.cpus);
  }
  if (rep != nullptr) line += " | " + doctor::StatusLine(*rep);
  return line;
}

Status WriteFile(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::OK();
  }
  return Env::Default()->WriteFileAtomic(path, text.data(), text.size()).WithContext("writing " +
                                                                                     path);
}

nlohmann::json WatchJson(const ProbeView& v, const telemetry::CpuAttribution& a,
                         const std::string& probe_dir, bool probe_on, int rc) {
  using J = nlohmann::json;
  auto num = [](double x) { return std::isnan(x) ? J() : J(x); };
  J ranks = J::array();
  for (const auto& r : v.facts.ranks) {
    ranks.push_back({{"rank", r.rank}, {"pid", r.pid}, {"steps", r.steps.size()},
                     {"wait_s", r.wait_s}, {"step_s", r.step_s},
                     {"wait_frac", r.step_s > 0 ? r.wait_s / r.step_s : 0.0},
                     {"timing", r.gpu_timing ? "cuda-events" : "host"}});
  }
  auto role = [&](const telemetry::RoleCpu& r) {
    return J{{"procs", r.procs}, {"cores", num(r.cores)}, {"demand", num(r.demand)},
             {"running_frac", num(r.running_frac)}, {"disk_wait_frac", num(r.disk_wait_frac)},
             {"minflt_per_s", num(r.minflt_per_s)}, {"majflt_per_s", num(r.majflt_per_s)}};
  };
  const auto& f = v.facts;
  return J{{"exit_status", rc},
           {"probe", probe_on},
           {"probe_dir", probe_dir},
           {"python_processes", v.python_procs},
           {"torch_processes", v.torch_procs},
           {"ranks", ranks},
           {"wait_frac", f.wait_frac()},
           {"dataloader",
            f.settings_known
                ? J{{"num_workers", f.num_workers}, {"batch_size", f.batch_size},
                    {"prefetch_factor", f.prefetch_factor}, {"pin_memory", f.pin_memory},
                    {"persistent_workers", f.persistent_workers}, {"worker_pids", v.worker_pids}}
                : J()},
           {"cause", doctor::InputCause(f, doctor::Thresholds{})},
           {"profiler_traces", v.traces},
           {"cpu",
            {{"duration_s", a.duration_s}, {"cpus", num(a.cpus)}, {"main", role(a.main)},
             {"workers", role(a.workers)}, {"other", role(a.other)},
             {"tree_cores", num(a.tree_cores)}, {"tree_demand", num(a.tree_demand)},
             {"machine_busy_cores", num(a.machine_busy_cores)},
             {"iowait_frac", num(a.iowait_frac)}, {"busiest_core_frac", num(a.busiest_core_frac)},
             {"saturated_cores", a.saturated_cores}, {"read_mib_s", num(a.read_mib_s)}}}};
}

int Watch(const WatchFlags& f) {
  if (f.command.empty()) {
    std::fprintf(stderr, "stoker watch: give the command after --\n");
    return 2;
  }
  auto spec = ProfileSpec(f);
  if (!spec.ok()) return Fail(spec.status());
  Env* env = Env::Default();
  auto out = env->NewWritableFile(f.out);
  if (!out.ok()) return Fail(out.status());

  // The probe: the bootstrap folder of stoker's Python package, on the job's PYTHONPATH.
  std::string probe_dir, boot_dir, probe_off_why;
  bool probe_on = !f.no_probe;
  if (f.no_probe) {
    probe_off_why = "--no-probe";
  } else {
    PythonSide side = FindPythonSide(/*need_package=*/true);
    if (side.package_dir.empty() || ::access((side.package_dir + "/_boot/sitecustomize.py").c_str(),
                                             R_OK) != 0) {
      probe_on = false;
      probe_off_why = fmt::format("stoker's Python package was not found with {} ({}); set "
                                  "STOKER_PYTHON to an interpreter that imports stoker",
                                  side.python, side.how);
    } else {
      boot_dir = side.package_dir + "/_boot";
      auto d = ProbeDir(f.out);
      if (!d.ok()) {
        probe_on = false;
        probe_off_why = d.status().message();
      } else {
        probe_dir = *d;
      }
    }
  }
  if (!probe_on && !spec->empty()) {
    std::fprintf(stderr, "stoker watch: the profiler window needs the probe (%s)\n",
                 probe_off_why.c_str());
  }

  std::unique_ptr<telemetry::NvmlSampler> nvml;
  std::string gpu_note;
  if (!f.no_gpu) {
    auto n = telemetry::NvmlSampler::Open();
    if (n.ok() && (*n)->device_count() > 0) {
      nvml = std::move(*n);
    } else {
      gpu_note = n.ok() ? "NVML found no GPU" : n.status().message();
    }
  } else {
    gpu_note = "--no-gpu";
  }
  bool tty = ::isatty(2) != 0;
  if (!nvml) {
    std::fprintf(stderr, "stoker watch: no GPU sampling (%s): sampling CPU and I/O only\n",
                 gpu_note.c_str());
  } else {
    std::fprintf(stderr, "stoker watch: sampling %d GPU(s) (%s) every %.2f s -> %s\n",
                 nvml->device_count(), nvml->device_name(0).c_str(), f.interval, f.out.c_str());
  }
  if (probe_on) {
    std::fprintf(stderr, "stoker watch: probe on (reports in %s)%s\n", probe_dir.c_str(),
                 spec->empty() ? "" : fmt::format("; profiler window {}", *spec).c_str());
  }

  std::vector<char*> argv;
  for (const auto& a : f.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::string pythonpath = probe_on ? PrependPythonPath(boot_dir) : "";
  // Handlers before the fork: a signal that arrives between fork and the parent's next
  // line must not kill watch (the child's exec resets handled signals to the default).
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  std::fflush(nullptr);
  pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "stoker watch: fork failed: %s\n", std::strerror(errno));
    return 1;
  }
  if (child == 0) {
    ::setpgid(0, 0);
    if (probe_on) {
      ::setenv("PYTHONPATH", pythonpath.c_str(), 1);
      ::setenv("STOKER_PROBE_DIR", probe_dir.c_str(), 1);
      if (!spec->empty()) ::setenv("STOKER_PROBE_PROFILE", spec->c_str(), 1);
    }
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "stoker watch: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(child, child);

  (void)(*out)->Append(telemetry::SamplesCsvHeader().data(), telemetry::SamplesCsvHeader().size());
  telemetry::ProcSampler proc(child);
  telemetry::ProbeReader reader(probe_dir);
  auto t0 = std::chrono::steady_clock::now();
  double epoch0 = std::chrono::duration<double>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  int status = 0;
  bool exited = false;
  uint64_t rows = 0;
  int forwarded = 0;
  double last_poll = -1;
  bool loop_started = false;
  ProbeView live;
  std::optional<doctor::Report> live_rep;
  doctor::DoctorInputs live_in;
  while (true) {
    int sig = g_signal.exchange(0);
    if (sig != 0) {
      // The third Ctrl-C ends a command that ignores the first two.
      int send = forwarded >= 2 ? SIGKILL : sig;
      ::kill(-child, send);
      ++forwarded;
      if (tty) std::fprintf(stderr, "\r\033[K");
      std::fprintf(stderr, "stoker watch: forwarded %s to the command%s\n",
                   send == SIGKILL ? "SIGKILL" : (sig == SIGINT ? "SIGINT" : "SIGTERM"),
                   forwarded == 2 ? " (once more sends SIGKILL)" : "");
    }
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Until the training loop starts, every sample polls the probe: the CPU attribution
    // starts with the loop (within one interval), not with the imports before it.
    if (probe_on && (last_poll < 0 || !loop_started || t - last_poll >= 0.5)) {
      last_poll = t;
      reader.Poll();
      live = Merge(reader);
      proc.SetRoles(live.main_pids, live.worker_pids);
      if (!loop_started && !live.facts.ranks.empty()) {
        loop_started = true;  // CPU attribution covers the training loop, not start-up
        proc.ResetAttribution();
      }
      if (tty && !live.facts.ranks.empty()) {
        AddCpu(proc.Attribution(), &live.facts);
        live_in.options.batch_size = f.batch_size;
        auto r = doctor::DiagnoseWatch(live_in, live.facts);
        if (r.ok()) live_rep = std::move(*r);
      }
    }
    telemetry::GpuSample host;
    host.t_s = t;
    proc.Sample(t, &host);
    std::vector<telemetry::GpuSample> samples;
    if (nvml) {
      samples = nvml->Sample(t);
      for (auto& s : samples) {
        s.proc_cpu_cores = host.proc_cpu_cores;
        s.sys_cpu_pct = host.sys_cpu_pct;
        s.cpus = host.cpus;
        s.read_mib_s = host.read_mib_s;
        s.write_mib_s = host.write_mib_s;
      }
    } else {
      samples.push_back(host);
    }
    for (const auto& s : samples) {
      std::string row = telemetry::SampleCsvRow(s, epoch0);
      (void)(*out)->Append(row.data(), row.size());
      ++rows;
    }
    if (tty) {
      std::string line = LiveLine(t, samples, host, live_rep ? &*live_rep : nullptr,
                                  probe_on ? &live : nullptr);
      std::fprintf(stderr, "\r%s\033[K", line.substr(0, 160).c_str());
    }
    pid_t w = ::waitpid(child, &status, WNOHANG);
    if (w == child) {
      exited = true;
      break;
    }
    if (w < 0 && errno != EINTR) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(f.interval));
  }
  if (tty) std::fprintf(stderr, "\r\033[K");
  (void)(*out)->Close();
  int rc = 1;
  if (exited && WIFEXITED(status)) rc = WEXITSTATUS(status);
  if (exited && WIFSIGNALED(status)) rc = 128 + WTERMSIG(status);
  std::fprintf(stderr, "stoker watch: command exited with status %d; %llu samples in %s\n", rc,
               static_cast<unsigned long long>(rows), f.out.c_str());

  // The final report: the probe (all of it), the samples, the user's and the probe's traces.
  ProbeView v;
  if (probe_on) {
    reader.Poll();
    v = Merge(reader);
  }
  telemetry::CpuAttribution cpu = proc.Attribution();
  AddCpu(cpu, &v.facts);
  ProbeNotes(reader, v, *spec, probe_on, probe_off_why, &v.facts.notes);
  std::vector<std::string> inputs = {f.out};
  for (const auto& t : f.traces) inputs.push_back(t);
  size_t user_inputs = inputs.size();
  for (const auto& t : v.traces) inputs.push_back(t);
  doctor::LoadOptions l;
  l.gpu_log.interval_s = f.interval;
  auto in = doctor::LoadInputs(env, inputs, l);
  if (!in.ok() && inputs.size() > user_inputs) {
    v.facts.notes.push_back("The profiler window's trace could not be read (" +
                            in.status().message() + "): the probe's timings only.");
    inputs.resize(user_inputs);
    in = doctor::LoadInputs(env, inputs, l);
  }
  if (!in.ok()) {
    Fail(in.status());
    std::fprintf(stderr, "stoker watch: the doctor could not read the samples\n");
    return rc;
  }
  in->options.batch_size = f.batch_size;
  if (in->options.batch_size == 0 && v.facts.batch_size > 0 && !in->traces.empty())
    in->options.batch_size = v.facts.batch_size;
  auto rep = doctor::DiagnoseWatch(*in, v.facts);
  if (!rep.ok()) {
    Fail(rep.status());
    return rc;
  }
  doctor::TextOptions to;
  to.color = ::isatty(1) != 0;
  to.max_findings = f.max_findings;
  std::string text = doctor::RenderText(*rep, to);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  if (!f.json.empty()) {
    nlohmann::json j = doctor::ReportToJson(*rep);
    j["watch"] = WatchJson(v, cpu, probe_dir, probe_on, rc);
    Status st = WriteFile(f.json, j.dump(2) + "\n");
    if (!st.ok()) Fail(st);
  }
  for (auto [path, fn] : {std::pair{f.md, &doctor::RenderMarkdown}, std::pair{f.html, &doctor::RenderHtml}}) {
    if (path.empty()) continue;
    Status st = WriteFile(path, fn(*rep));
    if (!st.ok()) Fail(st);
  }
  return rc;
}

}  // namespace

int RunWatch(const std::vector<std::string>& command, const std::string& out,
             const std::string& json, const std::string& profile_steps, int max_findings) {
  WatchFlags f;
  f.command = command;
  f.out = out;
  f.json = json;
  f.profile_steps = profile_steps;
  f.max_findings = max_findings;
  return Watch(f);
}

void RegisterWatchCommand(CLI::App& app) {
  auto f = std::make_shared<WatchFlags>();
  CLI::App* c = app.add_subcommand(
      "watch",
      "run a training command unchanged, measure it from inside (probe: DataLoader wait, "
      "workers, an optional profiler window) and outside (GPU via NVML, CPU and I/O), and "
      "diagnose it");
  c->add_option("command", f->command, "the command to run (after --)")->required();
  c->add_option("--out", f->out, "where to save the samples (CSV that stoker doctor reads); "
                                 "the probe's reports and traces go to <out>.probe/");
  c->add_option("--interval", f->interval, "seconds between samples")
      ->check(CLI::Range(0.01, 60.0));
  c->add_option("--trace", f->traces, "profiler trace files/folders to diagnose with the samples");
  c->add_option("--json", f->json, "write the doctor's report (and the probe's data) as JSON");
  c->add_option("--html", f->html, "write the doctor's report as HTML");
  c->add_option("--md", f->md, "write the doctor's report as Markdown");
  c->add_option("--batch-size", f->batch_size, "samples per step, for samples/s");
  c->add_option("--profile-steps", f->profile_steps,
                "run torch.profiler in the job for steps A:B (e.g. 50:60) and diagnose the trace");
  c->add_option("--profile-after", f->profile_after,
                "run torch.profiler for 10 steps starting this long after the first batch "
                "(e.g. 30s)");
  c->add_option("--max-findings", f->max_findings, "findings shown in the terminal summary");
  c->add_flag("--no-gpu", f->no_gpu, "do not load NVML");
  c->add_flag("--no-probe", f->no_probe, "do not put the probe into the job's Python processes");
  c->callback([f]() { SetAction([f]() { return Watch(*f); }); });
}

}  // namespace stoker::cli
