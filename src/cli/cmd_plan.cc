// stoker plan: the capacity planner (src/plan/), and `stoker plan measure`, the measured
// run the planner is checked against (the pipeline with slowed storage and an emulated
// training step).
//
//   stoker plan --gpus 64 --gpu-samples-per-s 2500 --batch 256 --dataset-samples 1281167 \
//       --sample-kb 110 --cpu-ms 2.1 --storage lustre --cache-gb 200 --epochs 90 --html p.html
//   stoker plan --from-bench pipeline.json --from-io io.json ...   (measured inputs)
//   taskset -c 0 stoker plan measure --data imgs --threads 2 --fused --read-latency-ms 5 \
//       --step-ms 40 --batch 32 --json m.json
#include <cstdint>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/pipeline_flags.h"
#include "cli/progress.h"
#include "io/fault_env.h"
#include "plan/plan.h"

namespace stoker::cli {
namespace {

struct PlanArgs {
  plan::PlanInputs in;
  std::string storage = "nvme";
  std::string from_bench, from_io;
  double sample_kb = 0, shard_mb = 0, cache_gb = 0;
  // Storage overrides (NaN = keep the profile's).
  double latency_ms = NAN, latency_p99_ms = NAN, stream_mb_s = NAN, node_mb_s = NAN,
         aggregate_gb_s = NAN, req_s = NAN, request_mb = NAN;
  int prefixes = 1;
  int max_inflight = -1;
  bool node_local_shuffle = false;
  std::string json, html;
  bool quiet = false;
};

Result<nlohmann::json> ReadJson(const std::string& path) {
  std::ifstream f(path);
  if (!f) return NotFound("cannot read {}", path);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("{}: not a JSON object", path);
  return j;
}

// A number field, or `def` when it is missing or not a number (never throws).
double Num(const nlohmann::json& j, const char* key, double def = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : def;
}

// CPU-ms per sample from `stoker bench pipeline --json`: the stages' thread CPU time over
// the samples delivered.
Status FromBenchPipeline(const std::string& path, plan::PlanInputs* in) {
  STOKER_ASSIGN_OR_RETURN(nlohmann::json j, ReadJson(path));
  if (!j.contains("stages") || !j["stages"].is_array() || !j.contains("samples"))
    return InvalidArgument("{}: not `stoker bench pipeline --json` output (no stages/samples)", path);
  double cpu = 0;
  for (const auto& s : j["stages"])
    if (s.is_object()) cpu += Num(s, "cpu_s");
  const double n = Num(j, "samples");
  if (n <= 0 || cpu <= 0) return InvalidArgument("{}: no samples or no CPU time recorded", path);
  if (in->cpu_ms_per_sample <= 0) in->cpu_ms_per_sample = 1000 * cpu / n;
  const double sps = Num(j, "samples_per_s"), mbs = Num(j, "mb_per_s");
  if (in->sample_bytes <= 0 && sps > 0 && mbs > 0) in->sample_bytes = mbs * 1e6 / sps;
  return Status::OK();
}

// A storage profile from `stoker bench io --json`: latency from the single-reader random
// reads (smallest block), per-stream bandwidth from one sequential reader (largest block),
// node bandwidth from the best point.
Status FromBenchIo(const std::string& path, plan::StorageProfile* p) {
  STOKER_ASSIGN_OR_RETURN(nlohmann::json j, ReadJson(path));
  if (!j.contains("points") || !j["points"].is_array() || j["points"].empty())
    return InvalidArgument("{}: not `stoker bench io --json` output (no points)", path);
  double lat50 = -1, lat99 = 0, lat_block = 1e300, seq = 0, seq_block = -1, best = 0;
  for (const auto& pt : j["points"]) {
    if (!pt.is_object()) continue;
    auto pit = pt.find("pattern");
    const std::string pat = pit != pt.end() && pit->is_string() ? pit->get<std::string>() : "";
    const double block = Num(pt, "block"), th = Num(pt, "threads"), mbs = Num(pt, "mb_s");
    best = std::max(best, mbs);
    if (pat == "rand" && th == 1 && block < lat_block) {
      lat_block = block;
      lat50 = Num(pt, "p50_us") / 1000;
      lat99 = Num(pt, "p99_us") / 1000;
    }
    if (pat == "seq" && th == 1 && block > seq_block) {
      seq_block = block;
      seq = mbs;
    }
  }
  if (lat50 < 0 && seq <= 0)
    return InvalidArgument("{}: no single-reader random or sequential point to build a profile from", path);
  *p = plan::StorageProfile{};
  p->name = "measured (" + path + ")";
  if (lat50 >= 0) p->latency_ms = lat50;
  p->latency_p99_ms = std::max(lat99, p->latency_ms);
  p->stream_mb_s = seq;
  p->node_mb_s = best;
  auto fit = j.find("file");
  p->source = "stoker bench io: " + (fit != j.end() && fit->is_string() ? fit->get<std::string>() : path);
  return Status::OK();
}

int RunPlan(PlanArgs a) {
  plan::PlanInputs& in = a.in;
  if (a.sample_kb > 0) in.sample_bytes = a.sample_kb * 1e3;
  if (!a.from_bench.empty()) {
    Status st = FromBenchPipeline(a.from_bench, &in);
    if (!st.ok()) return Fail(st);
  }
  if (!a.from_io.empty()) {
    Status st = FromBenchIo(a.from_io, &in.storage);
    if (!st.ok()) return Fail(st);
  } else {
    auto p = plan::NamedStorage(a.storage);
    if (!p.ok()) return Fail(p.status());
    in.storage = *p;
  }
  plan::StorageProfile& s = in.storage;
  if (a.prefixes < 1) return Fail(InvalidArgument("--prefixes must be >= 1"));
  s.aggregate_req_s *= a.prefixes;
  auto set = [](double v, double* dst) {
    if (!std::isnan(v)) *dst = v;
  };
  set(a.latency_ms, &s.latency_ms);
  if (!std::isnan(a.latency_ms) && std::isnan(a.latency_p99_ms)) s.latency_p99_ms = 0;
  set(a.latency_p99_ms, &s.latency_p99_ms);
  set(a.stream_mb_s, &s.stream_mb_s);
  set(a.node_mb_s, &s.node_mb_s);
  if (!std::isnan(a.aggregate_gb_s)) s.aggregate_mb_s = a.aggregate_gb_s * 1000;
  set(a.req_s, &s.aggregate_req_s);
  if (!std::isnan(a.request_mb)) s.request_bytes = a.request_mb * 1e6;
  if (a.max_inflight >= 0) s.max_inflight_per_node = a.max_inflight;
  if (in.format == "files" || in.format == "folder") {
    in.layout = plan::Layout::kFiles;
  } else if (in.format == "shards" || in.format == "wds" || in.format == "tfrecord" ||
             in.format == "parquet" || in.format == "mds" || in.format == "tar") {
    in.layout = plan::Layout::kShards;
  } else {
    return Fail(InvalidArgument("--format '{}': use files (one object per sample) or shards "
                                "(wds, tfrecord, parquet, mds, tar)",
                                in.format));
  }
  if (a.shard_mb > 0) {
    if (in.layout != plan::Layout::kShards)
      return Fail(InvalidArgument("--shard-mb given with --format {} (one object per sample)", in.format));
    in.shard_bytes = a.shard_mb * 1e6;
  }
  in.cache_bytes_per_node = a.cache_gb * 1e9;
  in.global_shuffle = !a.node_local_shuffle;
  if (in.sample_bytes <= 0)
    return Fail(InvalidArgument("--sample-kb is needed (or --from-bench with a pipeline run that read bytes)"));
  auto t0 = std::chrono::steady_clock::now();
  auto r = plan::Plan(in);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) return Fail(r.status());
  r->compute_ms = ms;
  if (!a.quiet) std::printf("%s", plan::FormatReport(*r).c_str());
  auto write = [](const std::string& path, const std::string& text) -> Status {
    if (path == "-") {
      std::printf("%s\n", text.c_str());
      return Status::OK();
    }
    return Env::Default()->WriteFileAtomic(path, text.data(), text.size());
  };
  if (!a.json.empty()) {
    Status st = write(a.json, plan::ReportJson(*r));
    if (!st.ok()) return Fail(st);
  }
  if (!a.html.empty()) {
    Status st = write(a.html, plan::ReportHtml(*r));
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

// -- plan measure --------------------------------------------------------------------------

struct MeasureArgs {
  PipelineFlags p;
  double read_latency_ms = 0;
  double step_ms = 0;
  int epochs = 1;
  int warmup_batches = 2;
  std::string json;
  bool quiet = false;
};

int RunMeasure(const MeasureArgs& a) {
  if (a.read_latency_ms < 0 || a.step_ms < 0)
    return Fail(InvalidArgument("--read-latency-ms and --step-ms must be >= 0"));
  if (a.epochs < 1) return Fail(InvalidArgument("--epochs must be >= 1"));
  auto opts = ToOptions(a.p);
  if (!opts.ok()) return Fail(opts.status());
  FaultInjectionEnv env;
  if (a.read_latency_ms > 0) {
    FaultRule rule;
    rule.path_contains = "";
    rule.read_latency_us = static_cast<int64_t>(std::llround(a.read_latency_ms * 1000));
    env.AddRule(rule);
  }
  opts->dataset.env = &env;
  auto pipe = Pipeline::Create(*opts);
  if (!pipe.ok()) return Fail(pipe.status());
  Pipeline& p = **pipe;
  const int64_t reads_before = env.reads.load();
  Progress prog("plan measure", p.batches_per_epoch() * a.epochs);
  using clk = std::chrono::steady_clock;
  const auto step = std::chrono::duration<double, std::milli>(a.step_ms);
  uint64_t done = 0, samples = 0, measured_samples = 0;
  double wait_s = 0;
  clk::time_point t_start{}, t_end{};
  bool started = false;
  for (int e = 0; e < a.epochs; ++e) {
    Status st = p.StartEpoch(e);
    if (!st.ok()) return Fail(st);
    for (;;) {
      auto w0 = clk::now();
      auto b = p.Next();
      auto w1 = clk::now();
      if (!b.ok()) {
        if (!IsEndOfStream(b.status())) return Fail(b.status());
        break;
      }
      ++done;
      samples += (*b)->size;
      if (started) {
        measured_samples += (*b)->size;
        wait_s += std::chrono::duration<double>(w1 - w0).count();
      }
      // The emulated training step: the GPU computes; the host thread only waits.
      if (a.step_ms > 0) std::this_thread::sleep_until(w1 + std::chrono::duration_cast<clk::duration>(step));
      if (!started && done == uint64_t(a.warmup_batches)) {
        started = true;
        t_start = clk::now();
      }
      t_end = clk::now();
      prog.Update(done);
    }
  }
  prog.Done();
  PipelineStats st = p.Stats();
  p.Stop();
  const double window = started ? std::chrono::duration<double>(t_end - t_start).count() : 0;
  if (!started || window <= 0 || measured_samples == 0)
    return Fail(InvalidArgument("plan measure: the dataset has too few batches ({}) for {} warm-up "
                                "batches; use a larger dataset, --epochs or a smaller --batch",
                                done, a.warmup_batches));
  const double rate = measured_samples / window;
  const double busy = a.step_ms / 1000 * double(done - a.warmup_batches) / window;
  const double reads_per_sample = samples ? double(env.reads.load() - reads_before) / samples : 0;
  double cpu = 0;
  for (const auto& s : st.stages) cpu += s.cpu_s;
  const double cpu_ms = st.samples ? 1000 * cpu / st.samples : 0;
  if (!a.quiet) {
    std::printf("stoker plan measure: %s\n", opts->data.c_str());
    std::printf("  %.1f samples/s after %d warm-up batches (%llu samples in %.2f s), emulated GPU "
                "busy %.1f%%, consumer waited %.2f s\n",
                rate, a.warmup_batches, (unsigned long long)measured_samples, window,
                100 * std::min(1.0, busy), wait_s);
    std::printf("  storage latency %.2f ms per read, %.2f reads/sample; pipeline CPU %.3f ms/sample; "
                "threads %d, prefetch %d\n",
                a.read_latency_ms, reads_per_sample, cpu_ms, st.threads, st.prefetch);
  }
  if (!a.json.empty()) {
    nlohmann::json j = {{"samples_per_s", rate},
                        {"gpu_util", std::min(1.0, busy)},
                        {"window_s", window},
                        {"samples", measured_samples},
                        {"consumer_wait_s", wait_s},
                        {"read_latency_ms", a.read_latency_ms},
                        {"reads_per_sample", reads_per_sample},
                        {"step_ms", a.step_ms},
                        {"batch_size", opts->batch_size},
                        {"threads", st.threads},
                        {"prefetch", st.prefetch},
                        {"cpu_ms_per_sample", cpu_ms},
                        {"pipeline_samples_per_s", st.samples_per_s}};
    std::string text = j.dump(2);
    Status ws = Env::Default()->WriteFileAtomic(a.json, text.data(), text.size());
    if (!ws.ok()) return Fail(ws);
  }
  return 0;
}

}  // namespace

void RegisterPlanCommands(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* c = app.add_subcommand(
      "plan", "capacity planner: CPU cores, storage bandwidth and cache for N GPUs, from measured numbers");
  plan::PlanInputs& in = a->in;
  c->add_option("--gpus", in.gpus, "GPUs in the cluster");
  c->add_option("--gpus-per-node", in.gpus_per_node, "GPUs per node")->capture_default_str();
  c->add_option("--gpu-samples-per-s", in.gpu_samples_per_s,
                "one GPU's training rate when fed (from `stoker tune batch-size`, watch or doctor)")
      ;
  c->add_option("--batch", in.batch_size, "batch size per GPU")->capture_default_str();
  c->add_option("--dataset-samples", in.dataset_samples, "samples in the dataset");
  c->add_option("--sample-kb", a->sample_kb, "mean stored sample size, KB (1e3 bytes)");
  c->add_option("--format", in.format, "files (one object per sample) or shards: wds, tfrecord, parquet, mds")
      ->capture_default_str();
  c->add_option("--shard-mb", a->shard_mb, "shard size, MB (sharded formats; default 256)");
  c->add_option("--cpu-ms", in.cpu_ms_per_sample, "CPU time per sample, ms (or --from-bench)");
  c->add_option("--from-bench", a->from_bench, "`stoker bench pipeline --json` output: CPU-ms per sample");
  c->add_option("--cores-per-node", in.cores_per_node, "cores for data loading per node (0: say what is needed)")
      ->capture_default_str();
  c->add_option("--workers-per-node", in.workers_per_node, "loader workers/threads per node (0: enough)")
      ->capture_default_str();
  c->add_option("--prefetch", in.prefetch_batches, "ready batches buffered per GPU")->capture_default_str();
  c->add_option("--storage", a->storage, "named profile: nvme, lustre, gpfs, weka, s3, gcs")->capture_default_str();
  c->add_option("--from-io", a->from_io, "`stoker bench io --json` output: the storage profile");
  c->add_option("--latency-ms", a->latency_ms, "override: mean first-byte latency per request");
  c->add_option("--latency-p99-ms", a->latency_p99_ms, "override: p99 latency per request");
  c->add_option("--stream-mb-s", a->stream_mb_s, "override: bandwidth of one request/connection");
  c->add_option("--node-mb-s", a->node_mb_s, "override: bandwidth per node");
  c->add_option("--aggregate-gb-s", a->aggregate_gb_s, "override: the storage system's total bandwidth");
  c->add_option("--requests-per-s", a->req_s, "override: requests/s the storage serves in total");
  c->add_option("--prefixes", a->prefixes, "object-store prefixes the keys spread over (S3/GCS rate limits are per prefix)")
      ->capture_default_str();
  c->add_option("--request-mb", a->request_mb, "override: largest request (ranged GET), MB");
  c->add_option("--max-inflight", a->max_inflight, "override: concurrent requests per node");
  double* cache_gb = &a->cache_gb;
  c->add_option("--cache-gb", *cache_gb, "local cache per node, GB")->capture_default_str();
  c->add_option("--cache-mb-s", in.cache_mb_s, "cache read bandwidth per node, MB/s")->capture_default_str();
  c->add_flag("--node-local-shuffle", a->node_local_shuffle,
              "each node reads the same part of the dataset every epoch (default: global reshuffle)");
  c->add_option("--epochs", in.epochs, "epochs")->capture_default_str();
  c->add_option("--target-hit-rate", in.target_hit_rate, "cache hit rate to size the cache for")->capture_default_str();
  c->add_option("--target-util", in.target_util, "GPU utilization that counts as fed")->capture_default_str();
  c->add_option("--decode-share", in.decode_share, "part of the CPU work GPU decoding takes over")->capture_default_str();
  c->add_option("--gpu-decode-ms", in.gpu_decode_ms, "GPU time per sample for that work, ms")->capture_default_str();
  c->add_option("--seed", in.seed, "simulation seed")->capture_default_str();
  c->add_option("--json", a->json, "write the plan as JSON (- for stdout)");
  c->add_option("--html", a->html, "write an HTML report with the what-if curves");
  c->add_flag("--quiet", a->quiet, "no terminal summary");
  c->callback([a, c] {
    if (c->get_subcommands().empty()) SetAction([a] { return RunPlan(*a); });
  });

  auto m = std::make_shared<MeasureArgs>();
  CLI::App* mc = c->add_subcommand(
      "measure", "run the pipeline with slowed storage and an emulated training step (the planner's check)");
  AddPipelineFlags(mc, &m->p);
  mc->add_option("--read-latency-ms", m->read_latency_ms, "sleep per storage read (fault-injecting Env)")
      ->capture_default_str();
  mc->add_option("--step-ms", m->step_ms, "emulated training step per batch (the consumer sleeps)")
      ->capture_default_str();
  mc->add_option("--epochs", m->epochs, "epochs")->capture_default_str();
  mc->add_option("--warmup-batches", m->warmup_batches, "batches excluded from the rate")->capture_default_str();
  mc->add_option("--json", m->json, "write the measurement as JSON");
  mc->add_flag("--quiet", m->quiet, "print nothing but errors");
  mc->callback([m] { SetAction([m] { return RunMeasure(*m); }); });
}

}  // namespace stoker::cli
