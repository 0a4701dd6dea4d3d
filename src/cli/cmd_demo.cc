// stoker demo: the README's main job. No user data: generates (once, cached) a small
// synthetic dataset, then runs a naive single-thread pipeline and the auto-tuned one in
// front of an emulated training step, and compares them.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli/commands.h"
#include "cli/pipeline_flags.h"
#include "cli/progress.h"
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

  PipelineOptions naive = base;
  naive.threads = 1;
  naive.prefetch = 1;
  auto r1 = RunOne("naive: 1 thread, prefetch 1", naive, a);
  if (!r1.ok()) return Fail(r1.status());
  PipelineOptions tuned = base;  // threads=auto, prefetch=auto
  auto r2 = RunOne("stoker: threads auto, prefetch auto", tuned, a);
  if (!r2.ok()) return Fail(r2.status());

  std::printf("  %-36s %10s %12s %12s %-10s\n", "configuration", "batches/s", "samples/s",
              "GPU waiting", "bottleneck");
  for (const DemoRun* r : {&*r1, &*r2}) {
    std::string name = r->name;
    std::printf("  %-36s %10.2f %12.0f %11.0f%% %-10s\n", name.c_str(), r->batches_per_s,
                r->samples_per_s, r->wait_frac * 100, r->bottleneck.c_str());
  }
  std::printf("\n  speedup: %.2fx  (the emulated GPU waited %.0f%% of the time with the naive "
              "loader, %.0f%% with stoker)\n",
              r2->batches_per_s / std::max(1e-9, r1->batches_per_s), r1->wait_frac * 100,
              r2->wait_frac * 100);
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
      app.add_subcommand("demo", "naive vs auto-tuned pipeline in front of an emulated GPU");
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
