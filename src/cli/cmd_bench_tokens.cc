// stoker bench tokens --data SPEC...: token index build (time, peak memory) and packed
// batch delivery next to the memcpy limit (src/tokens/token_bench.h).
#include <cstdint>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tokens/token_bench.h"

namespace stoker::cli {

void RegisterBenchTokensCommand(CLI::App& bench) {
  auto* c = bench.add_subcommand(
      "tokens", "LLM token batches: index build time and memory, tokens/s vs the memcpy limit");
  struct Args {
    std::vector<std::string> data;
    std::vector<double> weights;
    int64_t seq_len = 2048;
    int batch = 8, threads = 1, prefetch = 2;
    std::string packing = "concat", cache_dir, json, dtype = "int32", layout = "window";
    bool position_ids = false;
    uint64_t steps = 200, seed = 0;
    bool index_only = false, no_memcpy = false;
  };
  auto a = std::make_shared<Args>();
  c->add_option("--data", a->data, "token store spec(s): megatron:PREFIX, nanogpt:F.bin, ...")
      ->required();
  c->add_option("--weights", a->weights, "blend weights, one per --data");
  c->add_option("--seq-len", a->seq_len, "tokens per sample");
  c->add_option("--batch", a->batch, "micro batch");
  c->add_option("--packing", a->packing, "concat | best_fit | first_fit");
  c->add_option("--threads", a->threads, "batch assembly threads");
  c->add_option("--prefetch", a->prefetch, "batches assembled ahead");
  c->add_option("--steps", a->steps, "batches timed");
  c->add_option("--seed", a->seed, "shuffle seed");
  c->add_option("--dtype", a->dtype, "int32 | int64");
  c->add_option("--cache-dir", a->cache_dir, "index cache ('none': build in memory)");
  c->add_option("--layout", a->layout,
                 "window ([B, S+1], input_ids/labels views) | separate ([B, S] arrays)");
  c->add_flag("--position-ids", a->position_ids, "deliver position_ids in concat mode too");
  c->add_flag("--index-only", a->index_only, "stop after the index build");
  c->add_flag("--no-memcpy", a->no_memcpy, "skip the memcpy limit");
  c->add_option("--json", a->json, "write the numbers as JSON");
  c->callback([a] {
    SetAction([a]() -> int {
      tokens::TokenBenchOptions o;
      o.pipeline.data = a->data;
      o.pipeline.weights = a->weights;
      o.pipeline.index.seq_len = a->seq_len;
      auto mode = tokens::ParsePackMode(a->packing);
      if (!mode.ok()) return Fail(mode.status());
      o.pipeline.index.mode = *mode;
      o.pipeline.index.seed = a->seed;
      o.pipeline.index.cache_dir = a->cache_dir;
      o.pipeline.batch_size = a->batch;
      o.pipeline.threads = a->threads;
      o.pipeline.prefetch = a->prefetch;
      o.pipeline.int64_output = a->dtype == "int64";
      if (a->layout != "window" && a->layout != "separate")
        return Fail(InvalidArgument("--layout {} is not one of window, separate", a->layout));
      o.pipeline.window = a->layout == "window";
      if (a->position_ids) o.pipeline.position_ids = tokens::TokenPipelineOptions::PositionIds::kOn;
      o.steps = a->steps;
      o.index_only = a->index_only;
      o.memcpy_limit = !a->no_memcpy;
      auto r = tokens::RunTokenBench(o);
      if (!r.ok()) return Fail(r.status());
      std::printf("corpus: %llu documents, %llu tokens; %llu samples per epoch (seq_len %lld, %s)\n",
                  (unsigned long long)r->documents, (unsigned long long)r->tokens,
                  (unsigned long long)r->samples_per_epoch, (long long)a->seq_len,
                  a->packing.c_str());
      std::printf("index: open %.3f s, build %.3f s%s, %.1f MB of index, peak RSS %.1f MB -> %.1f MB\n",
                  r->open_s, r->index_build_s, r->index_from_cache ? " (from the cache)" : "",
                  r->index_bytes / 1e6, r->peak_rss_before / 1e6, r->peak_rss_after_index / 1e6);
      if (!r->index_from_cache)
        std::printf("index build: %.3f CPU-s (process CPU time, all threads)\n",
                    r->index_build_cpu_s);
      if (!a->index_only) {
        std::printf("delivery: %llu batches of %d x %lld in %.3f s: %.1f M tokens/s, %.1f M tokens "
                    "per CPU-second, padding %.1f%%\n",
                    (unsigned long long)r->batches, a->batch, (long long)a->seq_len, r->wall_s,
                    r->tokens_per_s / 1e6, r->tokens_per_cpu_s / 1e6,
                    100.0 * r->pad_tokens / std::max<double>(1, r->delivered_tokens + r->pad_tokens));
        if (r->memcpy_tokens_per_s > 0)
          std::printf("memcpy limit (the same %.1f bytes/token out of the page cache): %.1f M "
                      "tokens/s (%.2f GB/s); delivery / memcpy = %.2f\n",
                      r->out_bytes_per_token, r->memcpy_tokens_per_s / 1e6,
                      r->memcpy_bytes_per_s / 1e9, r->ratio_to_memcpy);
      }
      if (!a->json.empty()) {
        nlohmann::json j = {{"documents", r->documents}, {"tokens", r->tokens},
                            {"samples_per_epoch", r->samples_per_epoch},
                            {"seq_len", a->seq_len}, {"batch", a->batch}, {"packing", a->packing},
                            {"threads", a->threads}, {"open_s", r->open_s},
                            {"index_build_s", r->index_build_s}, {"index_bytes", r->index_bytes},
                            {"index_build_cpu_s", r->index_build_cpu_s},
                            {"index_from_cache", r->index_from_cache},
                            {"peak_rss_before", r->peak_rss_before},
                            {"peak_rss_after_index", r->peak_rss_after_index},
                            {"batches", r->batches}, {"wall_s", r->wall_s}, {"cpu_s", r->cpu_s},
                            {"tokens_per_s", r->tokens_per_s},
                            {"tokens_per_cpu_s", r->tokens_per_cpu_s},
                            {"memcpy_tokens_per_s", r->memcpy_tokens_per_s},
                            {"memcpy_bytes_per_s", r->memcpy_bytes_per_s},
                            {"ratio_to_memcpy", r->ratio_to_memcpy},
                            {"layout", a->layout}, {"position_ids", a->position_ids},
                            {"out_bytes_per_token", r->out_bytes_per_token}};
        std::string text = j.dump(2) + "\n";
        Status st = Env::Default()->WriteFileAtomic(a->json, text.data(), text.size());
        if (!st.ok()) return Fail(st);
      }
      return 0;
    });
  });
}

}  // namespace stoker::cli
