// stoker plan: capacity planning for a training cluster from numbers measured on one node.
//
//   PlanInputs in;                       // GPUs, per-GPU samples/s, dataset, CPU-ms, storage
//   in.storage = *NamedStorage("lustre");
//   auto r = Plan(in);                   // Result<PlanReport>
//   r->bottleneck, r->warm.gpu_util, r->cores_per_gpu, r->storage_mb_s_node, ...
//
// The model is a small discrete-event simulation of one node (nodes are symmetric; the
// storage system's shared limits are divided evenly between them), not a spreadsheet, so
// that queueing, the latency tail and the step-synchronous consumption of the GPUs show:
//
//   storage ──► W workers: read (latency + bytes / per-stream bandwidth, node link FIFO,
//   (or cache)             request-rate tokens), then CPU per sample on C cores (FIFO)
//              ──► ready buffer (prefetch × GPUs × batch samples) ──► G GPUs in lockstep:
//              one step takes G × batch samples and lasts batch / per-GPU samples/s
//
// A worker holds its slot through read and CPU work, as a DataLoader worker or a fused
// stoker thread does; more workers than cores hide storage latency (Little's law). Across
// nodes, synchronous data parallelism makes every step wait for the slowest node: the
// cluster's step adds the expected maximum of the per-node stalls over the node count.
//
// Pure functions of their inputs (seeded randomness, simulated clock): no threads, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace stoker::plan {

// A storage system as the planner sees it. Bandwidths are MB/s (1e6 bytes); 0 = no limit.
struct StorageProfile {
  std::string name = "custom";
  double latency_ms = 0.1;         // mean time to first byte of a request
  double latency_p99_ms = 0;       // 99th percentile (lognormal tail); 0 or <= mean: constant
  double stream_mb_s = 0;          // per request (one connection / one stream)
  double node_mb_s = 0;            // per node (NIC, client)
  double aggregate_mb_s = 0;       // the whole system, shared by all nodes
  double aggregate_req_s = 0;      // requests/s the whole system serves (prefixes x per-prefix)
  double request_bytes = 0;        // largest request (ranged GET size); 0 = whole object/shard
  int max_inflight_per_node = 0;   // concurrent requests per node; 0 = no limit
  std::string source;              // where the numbers come from
};

// Named profiles: "nvme", "lustre" (also "gpfs", "weka"), "s3", "gcs".
Result<StorageProfile> NamedStorage(const std::string& name);
std::vector<std::string> NamedStorageNames();

enum class Layout { kFiles, kShards };  // one object per sample, or packed shards

struct PlanInputs {
  // GPUs
  int gpus = 0;
  int gpus_per_node = 8;
  double gpu_samples_per_s = 0;    // one GPU's training rate when it never waits for data
  int batch_size = 256;            // per GPU
  // Dataset
  uint64_t dataset_samples = 0;
  double sample_bytes = 0;         // mean stored bytes per sample
  Layout layout = Layout::kFiles;
  double shard_bytes = 0;          // kShards: bytes per shard (default 256 MB)
  std::string format = "files";    // for the report only
  // Preprocessing on the node's CPUs
  double cpu_ms_per_sample = 0;    // CPU time per sample (decode + augment + collate)
  int cores_per_node = 0;          // cores for data loading; 0 = report what is needed
  int workers_per_node = 0;        // loader workers/threads; 0 = enough to hide latency
  int prefetch_batches = 2;        // ready batches buffered per GPU
  // Storage and cache
  StorageProfile storage;
  double cache_bytes_per_node = 0; // local cache (NVMe or page cache)
  double cache_mb_s = 3000;        // cache read bandwidth per node
  double cache_latency_ms = 0.08;
  bool global_shuffle = true;      // every epoch reshuffles all samples across nodes
  int epochs = 1;
  double target_hit_rate = 0.9;    // for the cache-size answer
  double target_util = 0.95;       // "fed" means GPU utilization at least this
  // GPU preprocessing (DALI-style decode on the GPU)
  double decode_share = 0.6;       // part of cpu_ms_per_sample that moves to the GPU
  double gpu_decode_ms = 0.25;     // GPU time per sample for that work
  // Simulation
  uint64_t seed = 1;
  int sim_steps = 48;              // steps simulated per scenario (first quarter is warm-up)
};

// One simulated scenario (one node).
struct SimResult {
  double samples_per_s = 0;        // per node, steady state
  double gpu_util = 0;             // fraction of time a GPU computes
  double step_s = 0;               // mean step period (compute + stall)
  double stall_mean_s = 0, stall_p99_s = 0;  // per-step data wait of the node
  double cpu_util = 0;             // busy fraction of the C cores
  double worker_read_frac = 0;     // fraction of worker time spent waiting on storage
  double link_util = 0;            // node storage link busy fraction (0 when unlimited)
  double storage_mb_s = 0;         // bytes fetched from storage per second (misses)
  double storage_req_s = 0;        // storage requests per second
  double hit_rate = 0;
  double first_step_s = 0;         // time until the first step starts (pipeline fill)
  double queue_mean = 0;           // mean ready samples in the buffer
  std::string bottleneck;          // "gpu", "cpu", "storage latency", "storage bandwidth",
                                   // "request rate", "workers"
  std::vector<double> stalls;      // per measured step
};

// The parameters of one node's simulation (derived from PlanInputs by Plan()).
struct NodeModel {
  int gpus = 1;
  int batch = 1;
  double step_s = 0;               // compute time of one step
  double cpu_s = 0;                // per sample
  int cores = 1;
  int workers = 1;
  int prefetch_batches = 2;
  int samples_per_request = 1;
  double request_bytes = 0;
  double hit_rate = 0;
  double latency_s = 0, latency_p99_s = 0, stream_bps = 0;  // bytes/s, 0 = unlimited
  double link_bps = 0;             // node link cap, bytes/s
  double req_per_s = 0;            // node share of the request-rate cap
  int max_inflight = 0;
  double cache_latency_s = 0, cache_bps = 0;
  uint64_t seed = 1;
  int steps = 48;
};

Status ValidateNodeModel(const NodeModel& m);
// Simulates `m.steps` steps; the first quarter (at least 2) are excluded as warm-up.
Result<SimResult> Simulate(const NodeModel& m);

// Expected maximum of n draws from the empirical distribution `xs` (for the slowest-node
// effect of synchronous steps).
double ExpectedMax(std::vector<double> xs, double n);

struct CurvePoint {
  double x = 0;
  double y = 0;        // the curve's main value
  double y2 = 0;       // a second value (see the curve's description)
};

struct Scenario {
  std::string name;    // "cold (epoch 1)", "warm (epoch 2+)", "GPU decode, warm"
  SimResult node;
  double cluster_samples_per_s = 0;
  double gpu_util = 0;             // cluster level (includes the slowest-node stall)
  double epoch_s = 0;
};

struct PlanReport {
  PlanInputs in;
  int nodes = 0;
  int cores_used = 0;              // cores per node in the scenarios
  int workers_used = 0;
  NodeModel model;                 // the warm scenario's node model
  Scenario cold, warm, gpu_decode;
  std::string bottleneck;          // of the warm (steady) scenario
  double expected_gpu_util = 0;    // warm
  // Needs: what keeps the GPUs at target_util.
  double cores_per_gpu_analytic = 0;   // samples/s x CPU-s, no queueing
  int cores_per_node_needed = 0;       // smallest integer the simulation says is enough (0 = not reachable)
  int workers_per_node_needed = 0;
  double storage_mb_s_node = 0, storage_mb_s_total = 0;   // cold epoch, at the GPUs' rate
  double storage_req_s_node = 0, storage_req_s_total = 0;
  double warm_storage_mb_s_total = 0;
  double cache_bytes_for_target = 0;   // per node, for target_hit_rate
  double cache_bytes_all = 0;          // per node, for every later epoch from cache
  double total_time_s = 0;             // cold + (epochs-1) x warm
  bool gpu_decode_pays = false;
  std::string gpu_decode_reason;
  int cores_per_node_needed_gpu_decode = 0;
  // The same question asked of the pipeline's offload model (src/gpu/offload_model.h: what
  // gpu_decode=auto and the doctor's gpu.preprocess_offload use), per GPU, on the warm
  // scenario's numbers: its verdict ("offload", "cpu-keeps-up", "gpu-busy", "no-gain") and
  // its reason. A disagreement with the simulation is named in `notes`.
  std::string offload_verdict, offload_reason;
  std::vector<std::string> notes;      // limits hit, assumptions, contradictions resolved
  // What-if curves.
  std::vector<CurvePoint> gpus_vs_cores;   // x total GPUs, y cores needed in total (0 = not
                                           // reachable), y2 expected GPU utilization with the
                                           // configured cores (or the needed ones)
  std::vector<CurvePoint> cache_vs_epoch;  // x cache per node bytes, y warm epoch s, y2 hit rate
  double compute_ms = 0;                   // wall time of Plan() (filled by the caller)
};

Status ValidateInputs(const PlanInputs& in);
Result<PlanReport> Plan(const PlanInputs& in);

std::string FormatReport(const PlanReport& r);
std::string ReportJson(const PlanReport& r);
std::string ReportHtml(const PlanReport& r);

}  // namespace stoker::plan
