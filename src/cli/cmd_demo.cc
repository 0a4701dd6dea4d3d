// stoker demo: the README's main job. No user data: generates (once, cached) a small
// synthetic dataset, then tells the whole story on it:
//   1. the setup most users have: a PyTorch DataLoader with torchvision transforms
//      (python/stoker/demo_torch.py) feeding an emulated training step, run under
//      `stoker watch` with a profiler window: the doctor's verdict, evidence and fix;
//   2. the same job on stoker's pipeline (threads and prefetch auto-tuned);
//   3. both side by side: samples/s, the share of time the emulated GPU waited, speedup.
// Without PyTorch and torchvision it compares a naive single-thread stoker pipeline with
// the auto-tuned one instead, and says so.
#include <cstdint>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "cli/pipeline_flags.h"
#include "cli/progress.h"
#include "cli/python_side.h"
#include "core/thread_pool.h"
#include "tools/synth.h"

namespace stoker::cli {
namespace {

struct DemoArgs {
  std::string dir;
  uint64_t count = 1200;
  int batch = 64;
  double step_ms = 40;
  int epochs = 2;
  uint64_t seed = 1;
};

struct DemoRun {
  std::string name;
  double batches_per_s = 0, samples_per_s = 0, wait_frac = 0;
  std::string bottleneck;
  int threads = 0, prefetch = 0;
  std::vector<TuningEvent> tuning;
};

Result<DemoRun> RunOne(const std::string& name, PipelineOptions o, const DemoArgs& a) {
  STOKER_ASSIGN_OR_RETURN(auto p, Pipeline::Create(o));
  Progress prog("  " + name, p->batches_per_epoch() * a.epochs);
  uint64_t done = 0;
  auto t0 = std::chrono::steady_clock::now();
  double wait_s = 0;
  for (int e = 0; e < a.epochs; ++e) {
    STOKER_RETURN_IF_ERROR(p->StartEpoch(e));
    for (;;) {
      auto w0 = std::chrono::steady_clock::now();
      auto b = p->Next();
      wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      if (!b.ok()) {
        if (IsEndOfStream(b.status())) break;
        return b.status();
      }
      // The emulated GPU step: the batch is busy for step_ms (a real step would launch
      // kernels and wait for them; the CPU is idle meanwhile, as here).
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(a.step_ms));
      prog.Update(++done);
    }
  }
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  prog.Done();
  PipelineStats st = p->Stats();
  DemoRun r;
  r.name = name;
  r.batches_per_s = done / wall;
  r.samples_per_s = st.samples / wall;
  r.wait_frac = wait_s / wall;
  r.bottleneck = st.bottleneck;
  r.threads = st.threads;
  r.prefetch = st.prefetch;
  r.tuning = st.tuning;
  return r;
}

// The PyTorch half: runs demo_torch.py under stoker watch. Fills `r` from the watch's JSON;
// returns false (with `why`) when PyTorch/torchvision or stoker's Python side is missing.
bool RunTorchHalf(const DemoArgs& a, const std::string& work, DemoRun* r, std::string* verdict,
                  std::string* why) {
  PythonSide side = FindPythonSide(/*need_package=*/true);
  if (side.package_dir.empty()) {
    *why = fmt::format("stoker's Python package not found with {} ({})", side.python, side.how);
    return false;
  }
  std::string probe = "'" + side.python + "' -c 'import torch, torchvision' >/dev/null 2>&1";
  if (side.python.find('\'') != std::string::npos || std::system(probe.c_str()) != 0) {
    *why = fmt::format("{} ({}) cannot import torch and torchvision", side.python, side.how);
    return false;
  }
  const int workers = 2;
  // The profiler window: a few steps after the first (warm-up), inside the epoch.
  int nsteps = static_cast<int>(a.count / std::max(1, a.batch));
  int first = 1 + nsteps / 5, last = std::min(nsteps, first + 4);
  std::string window = last > first ? fmt::format("{}:{}", first, last) : "";
  std::printf("1. The usual setup: a PyTorch DataLoader (torchvision ImageFolder, "
              "RandomResizedCrop 224, flip, normalize; num_workers=%d, batch %d) in front of "
              "the emulated step, run unchanged under `stoker watch --profile-steps %s`:\n\n",
              workers, a.batch, window.c_str());
  std::fflush(stdout);
  std::string json = work + "/watch.json";
  std::remove(json.c_str());
  int rc = RunWatch({side.python, side.package_dir + "/demo_torch.py", a.dir, "--batch",
                     std::to_string(a.batch), "--step-ms", fmt::format("{}", a.step_ms),
                     "--workers", std::to_string(workers)},
                    work + "/watch.csv", json, window, 3);
  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (rc != 0 || j.is_discarded() || !j.contains("watch") || j["watch"]["ranks"].empty()) {
    *why = fmt::format("the PyTorch job failed (exit status {})", rc);
    return false;
  }
  const auto& rk = j["watch"]["ranks"][0];
  double steps = rk.value("steps", 0.0), step_s = rk.value("step_s", 0.0),
         wait_s = rk.value("wait_s", 0.0);
  r->name = fmt::format("PyTorch DataLoader, num_workers={}", workers);
  r->batches_per_s = step_s > 0 ? steps / step_s : 0;
  r->samples_per_s = r->batches_per_s * a.batch;
  r->wait_frac = step_s > 0 ? wait_s / step_s : 0;
  std::string cause = j["watch"].value("cause", std::string());
  if (cause.rfind("input.", 0) == 0) cause = cause.substr(6);
  std::replace(cause.begin(), cause.end(), '_', ' ');
  r->bottleneck = cause;
  *verdict = j["verdict"].value("primary", std::string("?"));
  return true;
}

int RunDemo(const DemoArgs& a_in) {
  DemoArgs a = a_in;
  if (a.dir.empty()) {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    std::string base = xdg && *xdg ? std::string(xdg) + "/stoker/demo"
                                   : std::string(home && *home ? home : "/tmp") + "/.cache/stoker/demo";
    // One folder per generator version, count and seed: a cached dataset always matches.
    a.dir = fmt::format("{}/v{}-{}-seed{}", base, kSynthVersion, a.count, a.seed);
  }
  if (a.count < 64 || a.batch < 1 || a.step_ms < 0 || a.epochs < 1)
    return Fail(InvalidArgument("demo needs --count >= 64, --batch >= 1, --step-ms >= 0"));
  SynthOptions so;
  so.out = a.dir;
  so.count = a.count;
  so.seed = a.seed;
  Progress gprog("  generating", a.count);
  so.progress = [&](uint64_t d, uint64_t) { gprog.Update(d); };
  auto gen = GenerateImages(so);
  gprog.Done();
  if (!gen.ok()) return Fail(gen.status());
  std::printf("stoker demo: %d cores; dataset %s (%llu synthetic JPEGs, %s)\n",
              AvailableCpus(), a.dir.c_str(), (unsigned long long)a.count,
              gen->cached ? "cached" : "generated now, cached for later runs");
  std::printf("  emulated training step: %.0f ms per batch of %d (%.0f samples/s if never "
              "starved), %d epochs\n\n",
              a.step_ms, a.batch, a.step_ms > 0 ? a.batch * 1000.0 / a.step_ms : 0.0, a.epochs);

  PipelineOptions base;
  base.data = a.dir;
  base.batch_size = a.batch;
  base.seed = a.seed;
  base.rank = 0;
  base.world_size = 1;

  std::string work = a.dir + ".run";
  (void)Env::Default()->CreateDirs(work);
  DemoRun torch_run;
  std::string verdict, why;
  bool have_torch = RunTorchHalf(a, work, &torch_run, &verdict, &why);
  if (!have_torch) {
    std::printf("PyTorch half skipped: %s.\nShowing stoker's own comparison instead: a naive "
                "single-thread pipeline (what DataLoader(num_workers=0) does) against the "
                "auto-tuned one.\n\n",
                why.c_str());
    PipelineOptions naive = base;
    naive.threads = 1;
    naive.prefetch = 1;
    auto n = RunOne("naive: 1 thread, prefetch 1", naive, a);
    if (!n.ok()) return Fail(n.status());
    torch_run = *n;
  } else {
    std::printf("\n2. The same job on stoker's pipeline (same transforms, threads and prefetch "
                "auto-tuned):\n");
  }
  PipelineOptions tuned = base;  // threads=auto, prefetch=auto
  auto r2 = RunOne("stoker: threads auto, prefetch auto", tuned, a);
  if (!r2.ok()) return Fail(r2.status());
  const DemoRun* r1 = &torch_run;

  std::printf("\n%s side by side (emulated step %.0f ms per batch of %d):\n",
              have_torch ? "3. Both" : "Both", a.step_ms, a.batch);
  std::printf("  %-38s %12s %12s  %s\n", "configuration", "samples/s", "GPU waiting",
              have_torch ? "doctor's cause / stoker's bottleneck" : "bottleneck");
  const DemoRun* r2p = &*r2;
  for (const DemoRun* r : {r1, r2p}) {
    std::printf("  %-38s %12.0f %11.0f%%  %s\n", r->name.c_str(), r->samples_per_s,
                r->wait_frac * 100, r->bottleneck.empty() ? "-" : r->bottleneck.c_str());
  }
  std::printf("\n  speedup: %.2fx  (the emulated GPU waited %.0f%% of the time with %s, %.0f%% "
              "with stoker)\n",
              r2->samples_per_s / std::max(1e-9, r1->samples_per_s), r1->wait_frac * 100,
              have_torch ? "the DataLoader" : "the naive loader", r2->wait_frac * 100);
  if (have_torch)
    std::printf("  the doctor's verdict on the DataLoader run: %s (report above; trace and "
                "samples in %s)\n",
                verdict.c_str(), work.c_str());
  std::printf("  auto-tuned: %d stage threads, prefetch %d", r2->threads, r2->prefetch);
  if (!r2->tuning.empty()) std::printf("; last decision: %s", r2->tuning.back().what.c_str());
  std::printf("\n");
  if (r2->wait_frac < 0.05)
    std::printf("  the pipeline now keeps up: the training step is the bottleneck.\n");
  else
    std::printf("  still input-bound on %d cores: more cores, or a smaller decode (see "
                "docs/pipeline.md), would help.\n",
                AvailableCpus());
  return 0;
}

}  // namespace

void RegisterDemoCommand(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  auto* cmd =
      app.add_subcommand("demo", "a PyTorch DataLoader diagnosed by the doctor, then the same "
                                 "job on stoker's pipeline, in front of an emulated GPU");
  cmd->add_option("--dir", a->dir, "dataset cache (default ~/.cache/stoker/demo)");
  cmd->add_option("--count", a->count, "images to generate")->capture_default_str();
  cmd->add_option("--batch", a->batch, "batch size")->capture_default_str();
  cmd->add_option("--step-ms", a->step_ms, "emulated training step per batch")
      ->capture_default_str();
  cmd->add_option("--epochs", a->epochs, "epochs per configuration")->capture_default_str();
  cmd->add_option("--seed", a->seed, "dataset and shuffle seed")->capture_default_str();
  cmd->callback([a] { SetAction([a] { return RunDemo(*a); }); });
}

}  // namespace stoker::cli
