// stoker watch [--out samples.csv] [--interval 0.1] [--trace DIR] -- <command> [args...]
//
// Runs the command in its own process group, samples the GPUs (NVML, loaded with dlopen)
// and the process tree's CPU and disk I/O (/proc) about ten times a second, shows a live
// status line, forwards Ctrl-C/SIGTERM to the command, and at exit prints the doctor's
// verdict on the samples (plus any profiler traces found in --trace) and keeps the samples
// as a CSV that `stoker doctor` reads later. Exits with the command's exit status.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "cli/commands.h"
#include "doctor/doctor.h"
#include "doctor/render.h"
#include "io/env.h"
#include "telemetry/sampler.h"

namespace stoker::cli {

int RunDoctor(const std::vector<std::string>& inputs, const doctor::DoctorOptions& dopts,
              const doctor::LoadOptions& lopts, const std::string& json, const std::string& html,
              const std::string& md, bool color, int max_findings, bool quiet);

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
};

int Watch(const WatchFlags& f) {
  if (f.command.empty()) {
    std::fprintf(stderr, "stoker watch: give the command after --\n");
    return 2;
  }
  Env* env = Env::Default();
  auto out = env->NewWritableFile(f.out);
  if (!out.ok()) return Fail(out.status());

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

  std::vector<char*> argv;
  for (const auto& a : f.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
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
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "stoker watch: cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(child, child);

  (void)(*out)->Append(telemetry::SamplesCsvHeader().data(), telemetry::SamplesCsvHeader().size());
  telemetry::ProcSampler proc(child);
  auto t0 = std::chrono::steady_clock::now();
  double epoch0 = std::chrono::duration<double>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  int status = 0;
  bool exited = false;
  uint64_t rows = 0;
  int forwarded = 0;
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
      std::string line = fmt::format("[watch {:.1f}s]", t);
      for (const auto& s : samples) {
        if (s.gpu < 0) continue;
        line += fmt::format(" GPU{} {:.0f}% {:.1f}/{:.0f}G {:.0f}W", s.gpu, s.util,
                            s.mem_used_mib / 1024, s.mem_total_mib / 1024, s.power_w);
      }
      if (!std::isnan(host.proc_cpu_cores)) {
        line += fmt::format(" | CPU {:.1f}/{:.0f} cores | read {:.0f} MiB/s", host.proc_cpu_cores,
                            host.cpus, host.read_mib_s);
      }
      std::fprintf(stderr, "\r%s\033[K", line.c_str());
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

  std::vector<std::string> inputs = {f.out};
  for (const auto& t : f.traces) inputs.push_back(t);
  doctor::DoctorOptions d;
  d.batch_size = f.batch_size;
  doctor::LoadOptions l;
  l.gpu_log.interval_s = f.interval;
  int drc = RunDoctor(inputs, d, l, f.json, f.html, f.md, ::isatty(1) != 0, 5, false);
  if (drc != 0) std::fprintf(stderr, "stoker watch: the doctor could not read the samples\n");
  return rc;
}

}  // namespace

void RegisterWatchCommand(CLI::App& app) {
  auto f = std::make_shared<WatchFlags>();
  CLI::App* c = app.add_subcommand(
      "watch", "run a training command, sample GPU (NVML), CPU and I/O, and diagnose it");
  c->add_option("command", f->command, "the command to run (after --)")->required();
  c->add_option("--out", f->out, "where to save the samples (CSV that stoker doctor reads)");
  c->add_option("--interval", f->interval, "seconds between samples")
      ->check(CLI::Range(0.01, 60.0));
  c->add_option("--trace", f->traces, "profiler trace files/folders to diagnose with the samples");
  c->add_option("--json", f->json, "write the doctor's report as JSON");
  c->add_option("--html", f->html, "write the doctor's report as HTML");
  c->add_option("--md", f->md, "write the doctor's report as Markdown");
  c->add_option("--batch-size", f->batch_size, "samples per step, for samples/s");
  c->add_flag("--no-gpu", f->no_gpu, "do not load NVML");
  c->callback([f]() { SetAction([f]() { return Watch(*f); }); });
}

}  // namespace stoker::cli
