#include <cstdint>
#include <sys/resource.h>

#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "cli/pipeline_flags.h"
#include "cli/progress.h"
#include "io/fault_env.h"
#include "pipeline/stats_html.h"
#include "pipeline/stats_json.h"

namespace stoker::cli {
namespace {

struct BenchPipelineArgs {
  PipelineFlags p;
  int epochs = 1;
  std::string json, keys_out, html;
  bool quiet = false;
  // A slow source for benches of the cache (docs/cache.md): every read of the dataset
  // waits this long, and all reads share a link of this bandwidth (0 = off).
  double source_latency_ms = 0, source_mbps = 0;
};

int RunBenchPipeline(const BenchPipelineArgs& a) {
  auto opts = ToOptions(a.p);
  if (!opts.ok()) return Fail(opts.status());
  std::unique_ptr<FaultInjectionEnv> slow;
  if (a.source_latency_ms > 0 || a.source_mbps > 0) {
    slow = std::make_unique<FaultInjectionEnv>(opts->dataset.env ? opts->dataset.env
                                                                 : Env::Default());
    FaultRule r;
    r.read_latency_us = static_cast<int64_t>(a.source_latency_ms * 1000);
    r.bandwidth_bytes_per_s = static_cast<int64_t>(a.source_mbps * 1e6);
    slow->AddRule(r);
    opts->dataset.env = slow.get();
  }
  auto pipe = Pipeline::Create(*opts);
  if (!pipe.ok()) return Fail(pipe.status());
  Pipeline& p = **pipe;
  std::FILE* keys = nullptr;
  if (!a.keys_out.empty()) {
    keys = std::fopen(a.keys_out.c_str(), "w");
    if (!keys) return Fail(IOError("cannot write {}", a.keys_out));
  }
  if (a.epochs < 1) return Fail(InvalidArgument("--epochs must be >= 1"));
  Progress prog("bench pipeline", p.batches_per_epoch() * a.epochs);
  uint64_t done = 0;
  volatile uint64_t sink = 0;
  // --html: the source's counters (a Kafka source's lag per partition, fetch wait) and the
  // samples delivered, every 100 ms, for the report's charts.
  std::vector<StatsPoint> points;
  const int64_t t_run = Clock::Real()->NowNanos();
  int64_t next_point = t_run;
  uint64_t delivered = 0;
  auto look = [&] {
    PipelineStats now = p.Stats();
    points.push_back({(Clock::Real()->NowNanos() - t_run) * 1e-9, delivered,
                      std::move(now.source_counters)});
  };
  if (!a.html.empty()) look();
  Status failure;
  for (int e = 0; e < a.epochs && failure.ok(); ++e) {
    Status st = p.StartEpoch(e);
    if (!st.ok()) return Fail(st);
    for (;;) {
      auto b = p.Next();
      if (!b.ok()) {
        if (!IsEndOfStream(b.status())) failure = b.status();
        break;
      }
      const Batch& bt = **b;
      // Touch the batch the way a consumer would (one byte per page).
      if (bt.images) {
        const uint8_t* d = static_cast<const uint8_t*>(bt.images);
        size_t n = bt.image_bytes * bt.size;
        for (size_t i = 0; i < n; i += 4096) sink = sink + d[i];
      }
      if (keys)
        for (const auto& k : bt.keys) std::fprintf(keys, "%s\n", k.c_str());
      delivered += bt.size;
      if (!a.html.empty() && Clock::Real()->NowNanos() >= next_point) {
        look();
        next_point = Clock::Real()->NowNanos() + 100'000'000;
      }
      prog.Update(++done);
    }
  }
  prog.Done();
  if (keys) std::fclose(keys);
  if (!a.html.empty()) look();
  PipelineStats st = p.Stats();
  p.Stop();
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  if (!a.quiet) {
    std::printf("stoker bench pipeline: %s\n", opts->data.c_str());
    std::printf("  %llu samples in %llu batches, %.2f s: %.1f samples/s, %.1f MB/s read\n",
                (unsigned long long)st.samples, (unsigned long long)st.batches, st.wall_s,
                st.samples_per_s, st.mb_per_s);
    std::printf("  threads %d%s, prefetch %d, rank %d/%d, peak RSS %.0f MB (budget %.0f MB)\n",
                st.threads, st.autotune ? " (auto)" : "", st.prefetch, st.rank.rank,
                st.rank.world_size, ru.ru_maxrss / 1024.0, st.memory_budget / 1e6);
    std::printf("%s", FormatStats(st).c_str());
    if (st.cache.enabled) {
      const auto& c = st.cache;
      std::printf(
          "  cache %s: hit rate %.1f %%, %.1f MB fetched (%llu entries, %llu found fetched), "
          "%.1f MB streamed, stall %.2f s, %llu evictions, occupancy %.1f / %.1f MB (max %.1f)\n",
          c.dir.c_str(), 100 * c.hit_rate, c.fetched_bytes / 1e6, (unsigned long long)c.fetches,
          (unsigned long long)c.shared_entries, c.stream_bytes / 1e6, c.stall_s,
          (unsigned long long)c.evictions, c.occupancy_bytes / 1e6, c.limit_bytes / 1e6,
          c.max_occupancy_bytes / 1e6);
    }
    if (slow)
      std::printf("  source (--source-latency-ms %g, --source-mbps %g): %.1f MB read in %lld reads\n",
                  a.source_latency_ms, a.source_mbps, slow->bytes_read.load() / 1e6,
                  (long long)slow->reads.load());
    if (!st.tuning.empty()) {
      std::printf("  autotuner:\n");
      size_t shown = 0;
      for (const auto& t : st.tuning) {
        if (++shown > 12) {
          std::printf("    ... %zu more\n", st.tuning.size() - 12);
          break;
        }
        std::printf("    %6.2fs %s\n", t.t_s, t.what.c_str());
      }
    }
    if (st.skipped) {
      std::printf("  skipped %llu bad samples:\n", (unsigned long long)st.skipped);
      for (size_t i = 0; i < st.skipped_items.size() && i < 20; ++i)
        std::printf("    %s\n", st.skipped_items[i].c_str());
      if (st.skipped_items.size() > 20)
        std::printf("    ... (%zu more in --json)\n", st.skipped_items.size() - 20);
    }
  }
  if (!a.json.empty()) {
    std::ofstream f(a.json);
    StatsRunInfo run;
    run.data = opts->data;
    run.epochs = a.epochs;
    run.batch_size = opts->batch_size;
    run.peak_rss_bytes = ru.ru_maxrss * 1024L;  // process-level, so the run adds it
    f << StatsToJson(st, &run) << "\n";
    if (!f) return Fail(IOError("cannot write {}", a.json));
  }
  if (!a.html.empty()) {
    StatsRunInfo run;
    run.data = opts->data;
    run.epochs = a.epochs;
    run.batch_size = opts->batch_size;
    run.peak_rss_bytes = ru.ru_maxrss * 1024L;
    std::ofstream f(a.html);
    f << StatsToHtml(st, run, points);
    if (!f) return Fail(IOError("cannot write {}", a.html));
  }
  if (!failure.ok()) return Fail(failure);
  return 0;
}

}  // namespace

void RegisterBenchCommands(CLI::App& app, CLI::App& bench) {
  auto args = std::make_shared<BenchPipelineArgs>();
  auto* cmd = bench.add_subcommand("pipeline", "run the input pipeline as fast as it goes");
  AddPipelineFlags(cmd, &args->p);
  cmd->add_option("--epochs", args->epochs, "epochs to run")->capture_default_str();
  cmd->add_option("--json", args->json, "write metrics as JSON");
  cmd->add_option("--keys-out", args->keys_out, "write delivered sample keys, one per line");
  cmd->add_option("--html", args->html,
                  "write an HTML report: summary, stages, throughput over the run, the node "
                  "cache, the source's counters, and for a Kafka topic the lag per partition "
                  "and the fetch wait over the run");
  cmd->add_flag("--quiet", args->quiet, "print nothing but errors");
  cmd->add_option("--source-latency-ms", args->source_latency_ms,
                  "bench a slow source: add this latency to every read of the dataset");
  cmd->add_option("--source-mbps", args->source_mbps,
                  "bench a slow source: reads of the dataset share a link of this many MB/s");
  cmd->callback([args] { SetAction([args] { return RunBenchPipeline(*args); }); });
}

}  // namespace stoker::cli
