#include "plan/plan.h"

#include "gpu/offload_model.h"

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>

#include "core/random.h"

namespace stoker::plan {

// -- storage profiles --------------------------------------------------------------------

Result<StorageProfile> NamedStorage(const std::string& name) {
  StorageProfile p;
  p.name = name;
  if (name == "nvme" || name == "local") {
    // One datacenter NVMe SSD: ~80-100 us random read latency, a few GB/s.
    p.name = "nvme";
    p.latency_ms = 0.09;
    p.latency_p99_ms = 0.3;
    p.stream_mb_s = 0;
    p.node_mb_s = 6000;
    p.source = "local NVMe SSD class (PCIe 4.0 x4: ~6 GB/s sequential, ~0.1 ms reads); "
               "measure yours with `stoker bench io`";
    return p;
  }
  if (name == "lustre" || name == "gpfs" || name == "weka" || name == "wekafs" ||
      name == "parallel") {
    // A parallel file system reached over the node's network: metadata + data round trips
    // of ~0.5-1 ms, per-node bandwidth bounded by the client NIC.
    p.name = name == "parallel" ? "lustre" : name;
    p.latency_ms = 0.8;
    p.latency_p99_ms = 5;
    p.stream_mb_s = 1500;
    p.node_mb_s = 12500;  // 100 Gb/s client link
    p.aggregate_mb_s = 0;
    p.source = "parallel file system class (Lustre/GPFS/WekaFS): ~1 ms per small-file open+read, "
               "per-node bandwidth bounded by a 100 Gb/s client link; the system's aggregate "
               "bandwidth is site-specific: set --aggregate-gb-s";
    return p;
  }
  if (name == "s3") {
    p.latency_ms = 30;
    p.latency_p99_ms = 200;
    p.stream_mb_s = 87.5;        // one concurrent request per 85-90 MB/s
    p.node_mb_s = 8003;          // measured max S3 download of a c5n.18xlarge
    p.aggregate_req_s = 5500;    // GET/HEAD per second per partitioned prefix
    p.request_bytes = 16e6;      // byte ranges of 8-16 MB
    p.source = "AWS S3 (../shared/reference/remote-storage.md 4.3): 5,500 GET/s per partitioned "
               "prefix (set --prefixes), one concurrent request per 85-90 MB/s, 8-16 MB ranges, "
               "8,003 MB/s per node measured on c5n.18xlarge; first-byte latency 30 ms mean is "
               "an assumption";
    return p;
  }
  if (name == "gcs") {
    p.latency_ms = 40;
    p.latency_p99_ms = 250;
    p.stream_mb_s = 87.5;
    p.node_mb_s = 8000;
    p.aggregate_req_s = 5000;    // initial object reads per second per bucket (autoscales)
    p.request_bytes = 16e6;
    p.source = "Google Cloud Storage (../shared/reference/remote-storage.md 4.3): ~5,000 object "
               "reads/s per bucket initially (autoscaling); per-connection and per-node "
               "bandwidth assumed like S3's; latency is an assumption";
    return p;
  }
  return InvalidArgument("unknown storage profile '{}' (known: nvme, lustre, gpfs, weka, s3, gcs, "
                         "or give --latency-ms/--stream-mb-s/... for a custom one)",
                         name);
}

std::vector<std::string> NamedStorageNames() { return {"nvme", "lustre", "gpfs", "weka", "s3", "gcs"}; }

// -- the node simulation -----------------------------------------------------------------

Status ValidateNodeModel(const NodeModel& m) {
  if (m.gpus < 1 || m.batch < 1) return InvalidArgument("node model: gpus and batch must be >= 1");
  if (!(m.step_s > 0)) return InvalidArgument("node model: step time must be > 0");
  if (m.cores < 1 || m.workers < 1) return InvalidArgument("node model: cores and workers must be >= 1");
  if (m.samples_per_request < 1) return InvalidArgument("node model: samples per request must be >= 1");
  if (m.cpu_s < 0 || m.latency_s < 0 || m.hit_rate < 0 || m.hit_rate > 1)
    return InvalidArgument("node model: negative time or hit rate outside [0, 1]");
  if (m.steps < 4) return InvalidArgument("node model: simulate at least 4 steps");
  return Status::OK();
}

namespace {

constexpr double kZ99 = 2.3263478740408408;  // standard normal 99th percentile

// Lognormal with the given mean and 99th percentile; constant when p99 <= mean.
class Latency {
 public:
  Latency(double mean, double p99) : mean_(mean) {
    if (p99 > mean && mean > 0) {
      double r = std::min(std::log(p99 / mean), kZ99 * kZ99 / 2 - 1e-9);
      sigma_ = kZ99 - std::sqrt(kZ99 * kZ99 - 2 * r);
      mu_ = std::log(mean) - sigma_ * sigma_ / 2;
    }
  }
  double Draw(Rng& rng) const {
    if (sigma_ <= 0) return mean_;
    double u1 = std::max(rng.Uniform(), 1e-300), u2 = rng.Uniform();
    double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
    return std::exp(mu_ + sigma_ * z);
  }

 private:
  double mean_, mu_ = 0, sigma_ = 0;
};

enum EvKind { kFirstByte, kReadDone, kCpuDone, kStepDone };
struct Ev {
  double t;
  uint64_t seq;
  EvKind kind;
  int w;
  bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

class Sim {
 public:
  explicit Sim(const NodeModel& m)
      : m_(m), lat_(m.latency_s, m.latency_p99_s), rng_(m.seed, 0, 0, 77),
        remaining_(m.workers, 0), read_start_(m.workers, 0.0) {}

  SimResult Run() {
    const int step_samples = m_.gpus * m_.batch;
    cap_ready_ = std::max(1, m_.prefetch_batches) * step_samples;
    warm_ = std::max(2, m_.steps / 4);
    free_cores_ = m_.cores;
    for (int w = 0; w < m_.workers; ++w) TryStartWorker(w);
    while (!ev_.empty() && steps_done_ < m_.steps) {
      Ev e = ev_.top();
      ev_.pop();
      now_ = e.t;
      switch (e.kind) {
        case kFirstByte: OnFirstByte(e.w); break;
        case kReadDone: OnReadDone(e.w); break;
        case kCpuDone: OnCpuDone(e.w); break;
        case kStepDone: OnStepDone(); break;
      }
    }
    return Result();
  }

 private:
  void Push(double t, EvKind k, int w) { ev_.push(Ev{t, seq_++, k, w}); }
  bool Measuring() const { return steps_done_ >= warm_; }

  void TryStartWorker(int w) {
    if (ready_ >= cap_ready_) {
      parked_.push_back(w);
      return;
    }
    if (m_.max_inflight > 0 && reading_ >= m_.max_inflight) {
      io_wait_.push_back(w);
      return;
    }
    StartRead(w);
  }

  void StartRead(int w) {
    ++reading_;
    in_work_ += m_.samples_per_request;
    double done;
    const bool hit = m_.hit_rate >= 1 || (m_.hit_rate > 0 && rng_.Uniform() < m_.hit_rate);
    if (hit) {
      done = now_ + m_.cache_latency_s +
             (m_.cache_bps > 0 ? m_.request_bytes / m_.cache_bps : 0);
      if (Measuring()) ++hits_;
    } else {
      double t0 = now_;
      if (m_.req_per_s > 0) {
        t0 = std::max(now_, next_token_);
        next_token_ = t0 + 1.0 / m_.req_per_s;
        if (Measuring()) token_wait_ += t0 - now_;
      }
      double first = t0 + lat_.Draw(rng_);
      if (Measuring()) {
        ++misses_;
        miss_bytes_ += m_.request_bytes;
      }
      read_start_[w] = now_;
      // The transfer queues on the node's link in the order first bytes arrive.
      Push(first, kFirstByte, w);
      return;
    }
    if (Measuring()) read_time_ += done - now_;
    Push(done, kReadDone, w);
  }

  void OnFirstByte(int w) {
    double done = now_ + (m_.stream_bps > 0 ? m_.request_bytes / m_.stream_bps : 0);
    if (m_.link_bps > 0) {
      double xfer = m_.request_bytes / m_.link_bps;
      double start = std::max(link_free_, now_);
      link_free_ = start + xfer;
      if (Measuring()) link_busy_ += xfer;
      done = std::max(done, link_free_);
    }
    if (Measuring()) read_time_ += done - read_start_[w];
    Push(done, kReadDone, w);
  }

  void OnReadDone(int w) {
    --reading_;
    if (!io_wait_.empty()) {
      int w2 = io_wait_.front();
      io_wait_.pop_front();
      StartRead(w2);
    }
    remaining_[w] = m_.samples_per_request;
    RequestCpu(w);
  }

  void RequestCpu(int w) {
    if (free_cores_ > 0) {
      --free_cores_;
      if (Measuring()) cpu_busy_ += m_.cpu_s;
      Push(now_ + m_.cpu_s, kCpuDone, w);
    } else {
      cpu_queue_.push_back(w);
    }
  }

  void OnCpuDone(int w) {
    ++free_cores_;
    --in_work_;
    ++ready_;
    if (Measuring()) ++produced_;
    if (!cpu_queue_.empty()) {
      int w2 = cpu_queue_.front();
      cpu_queue_.pop_front();
      --free_cores_;
      if (Measuring()) cpu_busy_ += m_.cpu_s;
      Push(now_ + m_.cpu_s, kCpuDone, w2);
    }
    if (--remaining_[w] > 0) {
      RequestCpu(w);
    } else {
      TryStartWorker(w);
    }
    TryStartStep();
  }

  void TryStartStep() {
    const int need = m_.gpus * m_.batch;
    if (gpu_busy_ || ready_ < need) return;
    ready_ -= need;
    if (steps_started_ == 0) {
      first_step_ = now_;
    } else if (Measuring()) {
      stalls_.push_back(now_ - last_end_);
    }
    ++steps_started_;
    gpu_busy_ = true;
    Push(now_ + m_.step_s, kStepDone, -1);
    while (!parked_.empty() && ready_ < cap_ready_) {
      int w = parked_.front();
      parked_.pop_front();
      TryStartWorker(w);
    }
  }

  void OnStepDone() {
    gpu_busy_ = false;
    last_end_ = now_;
    if (Measuring()) {
      queue_sum_ += ready_;
      ++queue_n_;
    }
    ++steps_done_;
    if (steps_done_ == warm_) t_warm_ = now_;
    TryStartStep();
  }

  SimResult Result() {
    SimResult r;
    const double window = now_ - t_warm_;
    const int measured = steps_done_ - warm_;
    r.first_step_s = first_step_;
    if (measured <= 0 || window <= 0) {
      // The pipeline never delivered enough for the measured steps (cannot happen with
      // validated inputs: every resource has a finite service time).
      r.bottleneck = "none";
      return r;
    }
    // Steady rate: what the GPUs consumed, unless the pipeline produced less in the window
    // (the consumption then includes the buffer filled before the window).
    const double step_samples = double(m_.gpus) * m_.batch;
    r.samples_per_s = std::min(measured * step_samples, double(produced_)) / window;
    r.gpu_util = std::min(1.0, r.samples_per_s * m_.step_s / step_samples);
    r.step_s = step_samples / r.samples_per_s;
    double sum = 0;
    for (double s : stalls_) sum += s;
    r.stall_mean_s = stalls_.empty() ? 0 : sum / stalls_.size();
    std::vector<double> s = stalls_;
    std::sort(s.begin(), s.end());
    r.stall_p99_s = s.empty() ? 0 : s[std::min(s.size() - 1, size_t(0.99 * s.size()))];
    r.stalls = stalls_;
    r.cpu_util = std::min(1.0, cpu_busy_ / (m_.cores * window));
    r.worker_read_frac = std::min(1.0, read_time_ / (m_.workers * window));
    r.link_util = m_.link_bps > 0 ? std::min(1.0, link_busy_ / window) : 0;
    r.storage_mb_s = miss_bytes_ / window / 1e6;
    r.storage_req_s = misses_ / window;
    r.hit_rate = hits_ + misses_ > 0 ? double(hits_) / double(hits_ + misses_) : m_.hit_rate;
    r.queue_mean = queue_n_ ? queue_sum_ / queue_n_ : 0;
    r.bottleneck = Bottleneck(r, window);
    return r;
  }

  // The resource with the least capacity, from the model's service times (the simulation
  // says how much of it is reached; this names it).
  std::string Bottleneck(const SimResult& r, double window) const {
    const double k = m_.samples_per_request, miss = 1 - m_.hit_rate;
    const double inf = std::numeric_limits<double>::infinity();
    const double gpu = m_.gpus * m_.batch / m_.step_s;
    const double cpu = m_.cpu_s > 0 ? m_.cores / m_.cpu_s : inf;
    double read_per_req = miss * (m_.latency_s + (m_.stream_bps > 0 ? m_.request_bytes / m_.stream_bps : 0)) +
                          (1 - miss) * (m_.cache_latency_s + (m_.cache_bps > 0 ? m_.request_bytes / m_.cache_bps : 0));
    const double workers = m_.workers * k / (read_per_req + k * m_.cpu_s + 1e-300);
    const double inflight = m_.max_inflight > 0 ? m_.max_inflight * k / (read_per_req + 1e-300) : inf;
    const double link = m_.link_bps > 0 && miss > 0 ? m_.link_bps / (miss * m_.request_bytes) * k : inf;
    const double req = m_.req_per_s > 0 && miss > 0 ? m_.req_per_s / miss * k : inf;
    (void)window;
    if (r.gpu_util >= 0.99) return "gpu";
    struct C { const char* name; double cap; };
    const C caps[] = {{"cpu", cpu},
                      {"storage latency (workers)", workers},
                      {"storage latency (requests in flight)", inflight},
                      {"storage bandwidth", link},
                      {"request rate", req},
                      {"gpu", gpu}};
    const C* best = &caps[0];
    for (const C& c : caps)
      if (c.cap < best->cap) best = &c;
    return best->name;
  }

  const NodeModel& m_;
  Latency lat_;
  Rng rng_;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> ev_;
  uint64_t seq_ = 0;
  double now_ = 0;
  int cap_ready_ = 0, warm_ = 2;
  int ready_ = 0, in_work_ = 0, reading_ = 0, free_cores_ = 0;
  std::vector<int> remaining_;
  std::vector<double> read_start_;
  std::deque<int> parked_, io_wait_, cpu_queue_;
  double next_token_ = 0, link_free_ = 0;
  bool gpu_busy_ = false;
  int steps_started_ = 0, steps_done_ = 0;
  double first_step_ = 0, last_end_ = 0, t_warm_ = 0;
  std::vector<double> stalls_;
  double cpu_busy_ = 0, read_time_ = 0, link_busy_ = 0, token_wait_ = 0, miss_bytes_ = 0;
  uint64_t hits_ = 0, misses_ = 0, produced_ = 0;
  double queue_sum_ = 0;
  int queue_n_ = 0;
};

}  // namespace

Result<SimResult> Simulate(const NodeModel& m) {
  STOKER_RETURN_IF_ERROR(ValidateNodeModel(m));
  Sim sim(m);
  return sim.Run();
}

double ExpectedMax(std::vector<double> xs, double n) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const double m = static_cast<double>(xs.size());
  double e = 0, prev = 0;
  for (size_t j = 1; j <= xs.size(); ++j) {
    double cur = std::pow(j / m, n);
    e += xs[j - 1] * (cur - prev);
    prev = cur;
  }
  return e;
}

// -- the plan ------------------------------------------------------------------------------

Status ValidateInputs(const PlanInputs& in) {
  if (in.gpus < 1) return InvalidArgument("--gpus must be >= 1 (got {})", in.gpus);
  if (in.gpus_per_node < 1) return InvalidArgument("--gpus-per-node must be >= 1");
  if (in.gpus_per_node > in.gpus)
    return InvalidArgument("--gpus-per-node {} is more than --gpus {}", in.gpus_per_node, in.gpus);
  if (in.gpus % in.gpus_per_node != 0)
    return InvalidArgument("--gpus {} is not a whole number of nodes of --gpus-per-node {}", in.gpus,
                           in.gpus_per_node);
  if (!(in.gpu_samples_per_s > 0))
    return InvalidArgument("--gpu-samples-per-s must be > 0 (one GPU's training rate: from "
                           "`stoker tune batch-size`, `stoker watch` or `stoker doctor`)");
  if (in.batch_size < 1) return InvalidArgument("--batch must be >= 1");
  if (in.dataset_samples < 1) return InvalidArgument("--dataset-samples must be >= 1");
  if (!(in.sample_bytes > 0)) return InvalidArgument("--sample-kb must be > 0");
  if (!(in.cpu_ms_per_sample >= 0)) return InvalidArgument("--cpu-ms must be >= 0");
  if (in.cores_per_node < 0 || in.workers_per_node < 0)
    return InvalidArgument("--cores-per-node and --workers-per-node must be >= 0");
  if (in.prefetch_batches < 1) return InvalidArgument("--prefetch must be >= 1");
  if (in.epochs < 1) return InvalidArgument("--epochs must be >= 1");
  if (!(in.target_hit_rate > 0 && in.target_hit_rate <= 1))
    return InvalidArgument("--target-hit-rate must be in (0, 1]");
  if (!(in.target_util > 0 && in.target_util <= 1))
    return InvalidArgument("--target-util must be in (0, 1]");
  if (!(in.decode_share >= 0 && in.decode_share <= 1))
    return InvalidArgument("--decode-share must be in [0, 1]");
  if (!(in.gpu_decode_ms >= 0)) return InvalidArgument("--gpu-decode-ms must be >= 0");
  if (in.cache_bytes_per_node < 0) return InvalidArgument("--cache-gb must be >= 0");
  const StorageProfile& s = in.storage;
  if (s.latency_ms < 0 || s.stream_mb_s < 0 || s.node_mb_s < 0 || s.aggregate_mb_s < 0 ||
      s.aggregate_req_s < 0 || s.request_bytes < 0 || s.max_inflight_per_node < 0)
    return InvalidArgument("storage '{}': negative latency, bandwidth or limit", s.name);
  if (s.latency_p99_ms > 0 && s.latency_p99_ms < s.latency_ms)
    return InvalidArgument("storage '{}': p99 latency {} ms is below the mean {} ms", s.name,
                           s.latency_p99_ms, s.latency_ms);
  if (in.layout == Layout::kShards && in.shard_bytes > 0 && in.shard_bytes < in.sample_bytes)
    return InvalidArgument("--shard-mb ({} bytes) is smaller than one sample ({} bytes)",
                           in.shard_bytes, in.sample_bytes);
  if (uint64_t(in.gpus) * uint64_t(in.batch_size) > in.dataset_samples)
    return InvalidArgument("one global step ({} GPUs x batch {}) needs more samples than the "
                           "dataset has ({})",
                           in.gpus, in.batch_size, in.dataset_samples);
  if (in.gpu_samples_per_s * in.gpu_decode_ms / 1000 * in.decode_share >= 1 && in.decode_share > 0)
    return Status::OK();  // GPU decoding would use the whole GPU: reported, not an error
  return Status::OK();
}

namespace {

struct Derived {
  int nodes = 1;
  int samples_per_request = 1;
  double request_bytes = 0;      // bytes per simulated request
  double requests_per_unit = 1;  // storage requests per simulated request (ranged parts)
  double link_bps = 0, req_per_s = 0;
  double dataset_bytes = 0;
  double cache_share_bytes = 0;  // what a node must cache to hit every time
};

Derived Derive(const PlanInputs& in) {
  Derived d;
  d.nodes = in.gpus / in.gpus_per_node;
  const StorageProfile& s = in.storage;
  if (in.layout == Layout::kShards) {
    double shard = in.shard_bytes > 0 ? in.shard_bytes : 256e6;
    // A shard is streamed: a worker reads it in requests of the storage's range size
    // (default 4 MB, a typical read-ahead), each paying the latency.
    double req = std::min(shard, s.request_bytes > 0 ? s.request_bytes : 4e6);
    d.samples_per_request = std::max(1, int(std::lround(req / in.sample_bytes)));
    d.request_bytes = d.samples_per_request * in.sample_bytes;
  } else {
    d.samples_per_request = 1;
    d.request_bytes = in.sample_bytes;
    if (s.request_bytes > 0 && in.sample_bytes > s.request_bytes)
      d.requests_per_unit = std::ceil(in.sample_bytes / s.request_bytes);
  }
  double link = s.node_mb_s * 1e6;
  if (s.aggregate_mb_s > 0) {
    double share = s.aggregate_mb_s * 1e6 / d.nodes;
    link = link > 0 ? std::min(link, share) : share;
  }
  d.link_bps = link;
  d.req_per_s = s.aggregate_req_s > 0 ? s.aggregate_req_s / d.nodes / d.requests_per_unit : 0;
  d.dataset_bytes = double(in.dataset_samples) * in.sample_bytes;
  d.cache_share_bytes = in.global_shuffle ? d.dataset_bytes : d.dataset_bytes / d.nodes;
  return d;
}

double HitRate(const PlanInputs& in, const Derived& d, double cache_bytes) {
  if (d.cache_share_bytes <= 0) return 0;
  return std::min(1.0, cache_bytes / d.cache_share_bytes);
}

double StepSeconds(const PlanInputs& in) { return in.batch_size / in.gpu_samples_per_s; }

int AutoWorkers(const PlanInputs& in, const Derived& d, double cpu_s, int cores, double step_s) {
  const double demand = in.gpus_per_node * in.batch_size / step_s;  // samples/s per node
  const StorageProfile& s = in.storage;
  const double read = d.requests_per_unit * s.latency_ms / 1000 +
                      (s.stream_mb_s > 0 ? d.request_bytes / (s.stream_mb_s * 1e6) : 0);
  const double per_sample = read / d.samples_per_request + cpu_s;
  int w = int(std::ceil(1.25 * demand * per_sample));
  return std::max({w, cores, 1});
}

NodeModel MakeModel(const PlanInputs& in, const Derived& d, double hit, int cores, int workers,
                    double cpu_s, double step_s, int steps) {
  NodeModel m;
  m.gpus = in.gpus_per_node;
  m.batch = in.batch_size;
  m.step_s = step_s;
  m.cpu_s = cpu_s;
  m.cores = std::max(1, cores);
  m.workers = std::max(1, workers);
  m.prefetch_batches = in.prefetch_batches;
  m.samples_per_request = d.samples_per_request;
  m.request_bytes = d.request_bytes;
  m.hit_rate = hit;
  m.latency_s = d.requests_per_unit * in.storage.latency_ms / 1000;
  m.latency_p99_s = d.requests_per_unit * in.storage.latency_p99_ms / 1000;
  m.stream_bps = in.storage.stream_mb_s * 1e6;
  m.link_bps = d.link_bps;
  m.req_per_s = d.req_per_s;
  m.max_inflight = in.storage.max_inflight_per_node;
  m.cache_latency_s = in.cache_latency_ms / 1000;
  m.cache_bps = in.cache_mb_s * 1e6;
  m.seed = in.seed;
  // Bound the work of one simulation: at most ~120k samples, at least 12 steps.
  const double per_step = double(in.gpus_per_node) * in.batch_size;
  m.steps = std::max(12, std::min(steps, int(60000 / per_step)));
  // Shards: the window should see every worker finish a few requests.
  if (d.samples_per_request > 1)
    m.steps = std::max(m.steps, std::min(96, int(4.0 * d.samples_per_request * std::max(1, workers) / per_step) + 12));
  return m;
}

Scenario Cluster(const std::string& name, const SimResult& node, const NodeModel& m,
                 const PlanInputs& in, const Derived& d) {
  Scenario s;
  s.name = name;
  s.node = node;
  const double stall = d.nodes > 1 ? ExpectedMax(node.stalls, d.nodes) : node.stall_mean_s;
  // The node's own period is step_s + its mean stall; a synchronous cluster waits for the
  // slowest node every step.
  const double period = std::max(m.step_s + stall, node.step_s);
  s.cluster_samples_per_s = double(in.gpus) * in.batch_size / period;
  s.gpu_util = m.step_s / period;
  s.epoch_s = double(in.dataset_samples) / s.cluster_samples_per_s + node.first_step_s;
  return s;
}

}  // namespace

Result<PlanReport> Plan(const PlanInputs& in) {
  STOKER_RETURN_IF_ERROR(ValidateInputs(in));
  PlanReport r;
  r.in = in;
  const Derived d = Derive(in);
  r.nodes = d.nodes;
  const double step_s = StepSeconds(in);
  const double cpu_s = in.cpu_ms_per_sample / 1000;
  const double demand_node = in.gpus_per_node * in.gpu_samples_per_s;
  const double hit_warm = HitRate(in, d, in.cache_bytes_per_node);
  r.cores_per_gpu_analytic = in.gpu_samples_per_s * cpu_s;

  auto sim = [&](double hit, int cores, int workers, double cpu, double step, int steps)
      -> Result<std::pair<SimResult, NodeModel>> {
    NodeModel m = MakeModel(in, d, hit, cores, workers, cpu, step, steps);
    STOKER_ASSIGN_OR_RETURN(SimResult s, Simulate(m));
    return std::make_pair(std::move(s), m);
  };
  auto workers_for = [&](int cores, double cpu, double step) {
    return in.workers_per_node > 0 ? in.workers_per_node : AutoWorkers(in, d, cpu, cores, step);
  };
  // Smallest integer cores per node reaching the target utilization (or 0.98 of what more
  // cores can reach when something else caps it); 0 when even that is not reachable.
  auto cores_needed = [&](double hit, double cpu, double step, std::string* why) -> Result<int> {
    const double analytic = demand_node * cpu;
    int hi = std::max(1, int(std::ceil(analytic * 2)) + in.gpus_per_node);
    STOKER_ASSIGN_OR_RETURN(auto top, sim(hit, hi, workers_for(hi, cpu, step), cpu, step, 24));
    double goal = in.target_util;
    if (top.first.gpu_util < goal) {
      goal = 0.98 * top.first.gpu_util;
      if (why)
        *why = fmt::format("with unlimited cores GPU utilization stops at {:.0f}% ({}): cores "
                           "alone cannot reach the {:.0f}% target",
                           100 * top.first.gpu_util, top.first.bottleneck, 100 * in.target_util);
    }
    int lo = goal < in.target_util ? 1 : std::max(1, int(std::floor(analytic / 1.02)));
    if (lo > hi) lo = hi;
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      STOKER_ASSIGN_OR_RETURN(auto s, sim(hit, mid, workers_for(mid, cpu, step), cpu, step, 24));
      if (s.first.gpu_util >= goal) hi = mid; else lo = mid + 1;
    }
    // Confirm with the full-length simulation (the search uses short ones).
    for (int extra = 0; extra < 4; ++extra) {
      STOKER_ASSIGN_OR_RETURN(auto s, sim(hit, lo, workers_for(lo, cpu, step), cpu, step, in.sim_steps));
      if (s.first.gpu_util >= goal) break;
      ++lo;
    }
    return lo;
  };

  std::string cap_note;
  STOKER_ASSIGN_OR_RETURN(r.cores_per_node_needed, cores_needed(hit_warm, cpu_s, step_s, &cap_note));
  if (!cap_note.empty()) r.notes.push_back(cap_note);
  const int cores = in.cores_per_node > 0 ? in.cores_per_node : r.cores_per_node_needed;
  r.cores_used = cores;
  r.workers_used = workers_for(cores, cpu_s, step_s);
  r.workers_per_node_needed = AutoWorkers(in, d, cpu_s, r.cores_per_node_needed, step_s);

  STOKER_ASSIGN_OR_RETURN(auto warm, sim(hit_warm, cores, r.workers_used, cpu_s, step_s, in.sim_steps));
  STOKER_ASSIGN_OR_RETURN(auto cold, sim(0.0, cores, r.workers_used, cpu_s, step_s, in.sim_steps));
  r.model = warm.second;
  r.warm = Cluster("warm (epoch 2+)", warm.first, warm.second, in, d);
  r.cold = Cluster("cold (epoch 1)", cold.first, cold.second, in, d);
  r.bottleneck = warm.first.bottleneck;
  if (d.nodes > 1 && warm.first.gpu_util - r.warm.gpu_util > 0.03)
    r.bottleneck = fmt::format("synchronous steps: each waits for the slowest of {} nodes (per-node "
                               "stalls: {}; a node alone would reach {:.0f}%)",
                               d.nodes, warm.first.bottleneck, 100 * warm.first.gpu_util);
  r.expected_gpu_util = r.warm.gpu_util;

  // Needs at the GPUs' full rate.
  r.storage_mb_s_node = demand_node * in.sample_bytes / 1e6;
  r.storage_mb_s_total = r.storage_mb_s_node * d.nodes;
  r.storage_req_s_node = demand_node / d.samples_per_request * d.requests_per_unit;
  r.storage_req_s_total = r.storage_req_s_node * d.nodes;
  r.warm_storage_mb_s_total = r.storage_mb_s_total * (1 - hit_warm);
  r.cache_bytes_for_target = in.target_hit_rate * d.cache_share_bytes;
  r.cache_bytes_all = d.cache_share_bytes;
  r.total_time_s = r.cold.epoch_s + (in.epochs - 1) * r.warm.epoch_s;

  // GPU preprocessing: the decode share of the CPU work moves to the GPU and costs GPU time.
  {
    const double cpu2 = cpu_s * (1 - in.decode_share);
    const double step2 = step_s + in.batch_size * in.gpu_decode_ms / 1000;
    const int w2 = in.workers_per_node > 0 ? in.workers_per_node : AutoWorkers(in, d, cpu2, cores, step2);
    STOKER_ASSIGN_OR_RETURN(auto g, sim(hit_warm, cores, w2, cpu2, step2, in.sim_steps));
    r.gpu_decode = Cluster("GPU decode, warm", g.first, g.second, in, d);
    // Utilization of the GPU for *training*: the decode time is overhead.
    r.gpu_decode.gpu_util = r.gpu_decode.gpu_util * step_s / step2;
    STOKER_ASSIGN_OR_RETURN(r.cores_per_node_needed_gpu_decode, cores_needed(hit_warm, cpu2, step2, nullptr));
    const double gain = r.gpu_decode.cluster_samples_per_s / r.warm.cluster_samples_per_s - 1;
    r.gpu_decode_pays = gain > 0.05;
    r.gpu_decode_reason = fmt::format(
        "with {} cores/node: CPU preprocessing {:.0f} samples/s, GPU decode {:.0f} samples/s "
        "({:+.0f}%); GPU decode costs {:.2f} ms of GPU time per {}-sample step ({:.0f}% of a "
        "step) and frees {:.0f}% of the CPU work; cores/node needed {} -> {}",
        cores, r.warm.cluster_samples_per_s, r.gpu_decode.cluster_samples_per_s, 100 * gain,
        in.batch_size * in.gpu_decode_ms, in.batch_size,
        100 * in.batch_size * in.gpu_decode_ms / 1000 / step_s, 100 * in.decode_share,
        r.cores_per_node_needed, r.cores_per_node_needed_gpu_decode);
    // The offload model, per GPU: its share of the node's cores, its training rate as the
    // demand, the warm scenario's GPU busy share.
    gpu::OffloadInputs oi;
    oi.cpu_cores = std::max(1, cores / std::max(1, std::min(in.gpus, in.gpus_per_node)));
    oi.cpu_s_per_image = cpu_s;
    oi.required_images_per_s = in.gpu_samples_per_s;
    oi.gpu_busy_frac = r.warm.gpu_util;
    oi.gpu_s_per_image = in.gpu_decode_ms / 1000;
    oi.host_s_per_image = cpu_s * (1 - in.decode_share);
    const gpu::OffloadDecision od = gpu::DecideOffload(oi);
    r.offload_verdict = gpu::OffloadVerdictName(od.verdict);
    r.offload_reason = od.reason;
    if (od.use_gpu != r.gpu_decode_pays && od.verdict != gpu::OffloadVerdict::kUnknown)
      r.notes.push_back(fmt::format("GPU decode: the simulation says it {} ({:+.0f}%), the "
                                    "offload model says {} ({})",
                                    r.gpu_decode_pays ? "pays" : "does not pay", 100 * gain,
                                    r.offload_verdict, od.reason));
  }

  // What-if: GPUs in the cluster vs the cores they need (the node's need, scaled, while the
  // shared storage keeps up) and the utilization with the cores chosen above.
  {
    std::vector<int> node_counts;
    for (int n = 1; n <= std::max(4 * d.nodes, 8); n *= 2) node_counts.push_back(n);
    if (std::find(node_counts.begin(), node_counts.end(), d.nodes) == node_counts.end()) {
      node_counts.push_back(d.nodes);
      std::sort(node_counts.begin(), node_counts.end());
    }
    for (int n : node_counts) {
      PlanInputs v = in;
      v.gpus = n * in.gpus_per_node;
      Derived dv = Derive(v);
      double hit = HitRate(v, dv, in.cache_bytes_per_node);
      NodeModel m = MakeModel(v, dv, hit, cores, r.workers_used, cpu_s, step_s, 16);
      STOKER_ASSIGN_OR_RETURN(SimResult s, Simulate(m));
      Scenario sc = Cluster("", s, m, v, dv);
      CurvePoint p;
      p.x = v.gpus;
      p.y2 = sc.gpu_util;
      p.y = sc.gpu_util >= 0.98 * r.warm.gpu_util ? double(n) * r.cores_per_node_needed : 0;
      r.gpus_vs_cores.push_back(p);
    }
  }
  // What-if: local cache per node vs the warm epoch time.
  for (int i = 0; i <= 8; ++i) {
    double cache = d.cache_share_bytes * i / 8;
    double hit = HitRate(in, d, cache);
    NodeModel m = MakeModel(in, d, hit, cores, r.workers_used, cpu_s, step_s, 16);
    STOKER_ASSIGN_OR_RETURN(SimResult s, Simulate(m));
    Scenario sc = Cluster("", s, m, in, d);
    r.cache_vs_epoch.push_back(CurvePoint{cache, sc.epoch_s, hit});
  }

  // Notes.
  if (in.cores_per_node > 0 && in.cores_per_node < r.cores_per_node_needed)
    r.notes.push_back(fmt::format("{} cores/node given, {} needed to keep the GPUs at {:.0f}%",
                                  in.cores_per_node, r.cores_per_node_needed, 100 * in.target_util));
  if (in.workers_per_node > 0 && in.workers_per_node < r.workers_per_node_needed)
    r.notes.push_back(fmt::format("{} workers/node given; {} hide the storage latency",
                                  in.workers_per_node, r.workers_per_node_needed));
  if (in.cache_bytes_per_node >= d.cache_share_bytes && in.cache_bytes_per_node > 0)
    r.notes.push_back("the cache holds the whole working set: epochs 2+ read no storage");
  if (in.storage.aggregate_req_s > 0 && r.storage_req_s_total > in.storage.aggregate_req_s)
    r.notes.push_back(fmt::format(
        "the cluster needs {:.0f} requests/s cold; the storage serves {:.0f}: pack samples into "
        "shards (fewer, larger requests) or spread keys over more prefixes",
        r.storage_req_s_total, in.storage.aggregate_req_s));
  if (in.storage.aggregate_mb_s > 0 && r.storage_mb_s_total > in.storage.aggregate_mb_s)
    r.notes.push_back(fmt::format("the cluster needs {:.0f} MB/s cold; the storage delivers {:.0f} MB/s "
                                  "in aggregate: a local cache makes later epochs cheaper",
                                  r.storage_mb_s_total, in.storage.aggregate_mb_s));
  if (in.gpu_samples_per_s * in.gpu_decode_ms / 1000 >= 0.5 && in.decode_share > 0)
    r.notes.push_back("GPU decode would take half of the GPU's time or more at this rate");
  return r;
}

}  // namespace stoker::plan
