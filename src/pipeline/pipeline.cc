// The executor. Stages and their workers:
//
//   admission ─► read (R threads) ─► Q ─► decode ─► augment (C compute threads)
//                                                      │ writes into its
//   consumer ◄── ready batches (in order) ◄── batch ◄──┘ slot of batch b
//
// Read threads wait on storage; compute threads decode a sample and augment it straight
// away, while the decoded image is still in the core's cache (handing it to another thread
// cost ~20% of throughput in a measurement on 2 cores). With fused workers (fixed
// --threads N, or `fused`) each of N threads runs read, decode and augment for its sample.
//
// The parts, each in its own file:
//   BatchAssembler (batch_assembler.h)  admission window, batch slots, in-order delivery
//   BatchPool (batch_pool.h)            batch buffers, budget = the window + 2
//   sample_ops.h                        decode and augment of one sample
//   Autotuner (autotune.h)              thread counts, prefetch, topology (pure)
//   ActivityBoard (watchdog.h)          what each worker is doing, for the stall report
//   WorkerTargets (worker_targets.h)    how many workers of each stage run; parks the rest
//   SummarizeStages, TunerSampler       counters -> stats and tuner snapshots (observe.h)
// PipelineImpl below owns the threads: it validates options, spawns and stops workers, runs
// the tuner loop and the watchdog, and assembles the stats.
//
// Admission bounds batch memory; Q is bounded, which bounds sample memory; augment never
// blocks on output (its slot is reserved), so the graph cannot deadlock. Items, samples and
// decoded images are recycled through free lists, batch buffers through the pool, so
// steady state touches no fresh pages.
#include "pipeline/pipeline.h"

#include <cstdint>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/mutex.h"
#include "core/queue.h"
#include "core/thread_pool.h"
#include "io/object_env.h"
#include "io/object_prefetch.h"
#include "pipeline/autotune.h"
#include "pipeline/batch_assembler.h"
#include "pipeline/batch_pool.h"
#include "pipeline/cache_plan.h"
#include "pipeline/node_share.h"
#include "pipeline/observe.h"
#include "pipeline/options_schema.h"
#include "pipeline/plan.h"
#include "pipeline/sample_ops.h"
#include "pipeline/stages.h"
#include "pipeline/watchdog.h"
#include "pipeline/worker_targets.h"

namespace stoker {
namespace {

using ItemPtr = std::unique_ptr<Item>;

class PipelineImpl final : public Pipeline, public std::enable_shared_from_this<PipelineImpl> {
 public:
  explicit PipelineImpl(const PipelineOptions& o) : opts_(o) {}
  ~PipelineImpl() override { Stop(); }

  Status Init();
  Status StartEpoch(int epoch, uint64_t start_batch) override;
  Status ResumeEpoch(int epoch, uint64_t consumed) override;
  Result<BatchPtr> NextWithin(int64_t max_wait_ns, bool* timed_out) override;
  void Stop() override;
  uint64_t batches_per_epoch() const override { return num_batches_; }
  uint64_t samples_per_epoch() const override { return per_rank_; }
  uint64_t pass_batches() const override { return pass_batches_; }
  uint64_t ConsumedAfter(uint64_t batches) const override {
    uint64_t taken = std::min<uint64_t>(pass_samples_, batches * opts_.batch_size);
    // The pass's last batch ends the epoch for every rank, whatever the tail rule dropped.
    if (batches >= pass_batches_) return ds_->size();
    return stoker::ConsumedAfter(ds_->size(), rank_.world_size, pass_consumed_, taken);
  }
  std::string Fingerprint() const override { return fingerprint_; }
  const Dataset& dataset() const override { return *ds_; }
  PipelineStats Stats() const override;
  const PipelineOptions& options() const override { return opts_; }
  Result<std::vector<uint64_t>> EpochOrder(int epoch) const override {
    return PlanEpoch(ds_->shards(), ds_->size(), epoch, plan_);
  }

 private:
  Status StartPass(int epoch, uint64_t consumed, uint64_t index_base);
  // Joins every worker; with grace_ns >= 0, detaches the workers still running after that
  // much real time (blocked in a read) instead of waiting for them.
  void StopWorkers(int64_t grace_ns = -1) EXCLUDES(exit_mu_, stats_mu_);
  void SpawnWorkers() EXCLUDES(exit_mu_);
  template <typename Body>
  void SpawnWorker(std::string name, Body body) EXCLUDES(exit_mu_);
  void ReadLoop(int id);
  // Fused raw workers on a source with a raw run read (raw_runs_): a batch per admission.
  void RunLoop(int id);
  // A sample's error as the batch reports it (naming the sample by key and location);
  // counted as a skip under on_error=skip.
  Status SampleError(const std::string& key, const std::string& location, const Status& st)
      EXCLUDES(stats_mu_);
  void DecodeLoop(int id);
  // `now`: the clock when the stage begins (the previous stage's end, read once); set to
  // when it ends. A clock read costs 0.1-0.3 us in a VM: several per sample were a fifth
  // of a 1 KB raw sample's time.
  bool DoDecode(Item* it, int worker, CpuMeter* meter, int64_t* now);
  void DoAugment(Item* it, int worker, ResizeScratch* scratch, CpuMeter* meter, int64_t* now);
  void TunerLoop();
  bool Active(int stage, int id) const { return targets_.Active(stage, id); }
  bool WaitActive(int stage, int id) { return targets_.WaitActive(stage, id, stop_); }
  void ChooseTopology() EXCLUDES(stats_mu_);
  void FinishItem(Item* it, const Status& st);  // any stage; st non-OK = skip or fail
  void Warn(const std::string& msg) EXCLUDES(stats_mu_);
  std::string StallReport(int64_t now, int64_t waited_ns) const;
  int PoolBudget(int prefetch) const { return prefetch + 3; }  // window (prefetch + 1) + 2

  ItemPtr GetItem() EXCLUDES(item_mu_) {
    MutexLock l(&item_mu_);
    if (free_items_.empty()) return std::make_unique<Item>();
    ItemPtr it = std::move(free_items_.back());
    free_items_.pop_back();
    return it;
  }
  void PutItem(ItemPtr it) EXCLUDES(item_mu_) {
    MutexLock l(&item_mu_);
    free_items_.push_back(std::move(it));
  }

  PipelineOptions opts_;
  Clock* clock_ = nullptr;
  std::unique_ptr<CacheEnv> cache_;  // cache_dir: in front of the dataset's Env (outlives ds_)
  // Look-ahead across object-store shards without a cache_ (PrefetchObject): this pass's
  // spans of the order (cache_plan.h), each with its shard's URL when the span starts at the
  // shard's head (else empty: nothing to warm), and how many spans were hinted. Set by
  // StartPass before the workers start; read by them.
  Mutex ahead_mu_;
  std::vector<uint64_t> ahead_first_ GUARDED_BY(ahead_mu_);
  std::vector<std::string> ahead_url_ GUARDED_BY(ahead_mu_);
  size_t ahead_hinted_ GUARDED_BY(ahead_mu_) = 0;
  std::atomic<uint64_t> ahead_due_{UINT64_MAX};  // the position where the next hint is due
  static constexpr size_t kAheadSpans = 2;  // shards warmed ahead of the one being read
  void PlanObjectLookahead() EXCLUDES(ahead_mu_);
  void HintAhead(uint64_t pos) EXCLUDES(ahead_mu_);
  std::unique_ptr<Dataset> ds_;
  EpochPlanOptions plan_;
  RankInfo rank_;
  std::string fingerprint_;
  uint64_t per_rank_ = 0, num_batches_ = 0;
  std::atomic<int> cpu_budget_{1};  // the tuner thread may change it (NodeBudget::Refresh)
  std::unique_ptr<NodeBudget> node_budget_;  // used by Init, then by the tuner thread only
  std::string budget_why_ GUARDED_BY(stats_mu_);
  int64_t memory_budget_ = 0;
  size_t image_bytes_ = 0;
  std::shared_ptr<BatchPool> pool_;
  std::unique_ptr<BatchAssembler> asm_;
  std::unique_ptr<Autotuner> tuner_;
  std::unique_ptr<ActivityBoard> board_;
  bool autotune_ = false;
  bool fused_ = false;  // each read thread also decodes and augments its sample
  // decode="raw" from a source that reads raw runs (Dataset::CanReadRawRun: Kafka with
  // value=raw): fused workers admit a batch at a time and read it with one ReadRawRun.
  bool raw_runs_ = false;
  bool auto_threads_ = false;  // threads=auto without `fused`: the topology may change per epoch
  // Counters at the start of the current epoch (read wall, compute CPU, items), for the
  // per-epoch topology choice.
  int64_t mark_read_ns_ = 0, mark_compute_cpu_ns_ = 0;
  uint64_t mark_read_items_ = 0, mark_compute_items_ = 0;

  // The pass in flight (StartEpoch/ResumeEpoch): this rank's order, its length.
  int epoch_ = -1;
  std::vector<uint64_t> order_;
  uint64_t pass_consumed_ = 0, pass_samples_ = 0, pass_batches_ = 0;
  std::atomic<bool> stop_{false};
  bool started_ = false;

  std::unique_ptr<BoundedQueue<ItemPtr>> q_decode_;
  Mutex item_mu_;
  std::vector<ItemPtr> free_items_ GUARDED_BY(item_mu_);

  // Workers. Worker ids on the activity board: read threads first, then compute threads.
  WorkerTargets targets_;
  std::vector<std::thread> workers_;
  // One flag per worker, set as its loop returns (workers_[i] <-> done_[i]); Stop() waits on
  // exit_cv_ for them with a deadline. Shared with the thread, which may outlive a detach.
  Mutex exit_mu_;
  CondVar exit_cv_;
  std::vector<std::shared_ptr<std::atomic<bool>>> done_;
  std::string detached_;  // set when Stop() detached a worker blocked in a read
  // A Next() that returned timed out: the wait it continues (consumer stats, watchdog).
  bool next_pending_ = false, next_warned_ = false;
  int64_t next_enter_ns_ = 0;
  std::thread tuner_thread_;
  Mutex tuner_mu_;
  CondVar tuner_cv_;

  // Metrics.
  StageCounters sc_[kNumStages];
  std::atomic<uint64_t> samples_out_{0}, batches_out_{0};
  ConsumerCounters consumer_;
  int64_t t_start_ns_ = 0;
  int64_t last_next_return_ns_ = 0;
  mutable Mutex stats_mu_;
  std::vector<std::string> skipped_ GUARDED_BY(stats_mu_);  // "key (location): reason"
  uint64_t skipped_count_ GUARDED_BY(stats_mu_) = 0;
  std::vector<TuningEvent> tuning_ GUARDED_BY(stats_mu_);
  std::vector<std::string> warnings_ GUARDED_BY(stats_mu_);
};

// FNV-1a over the dataset's size, format, shard layout and up to 16 evenly spaced keys.
std::string DatasetFingerprint(const Dataset& ds) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL;
  };
  auto mix_str = [&](const std::string& s) {
    mix(s.data(), s.size());
    mix("\0", 1);
  };
  uint64_t n = ds.size();
  mix(&n, sizeof n);
  mix_str(ds.format());
  uint64_t shards = ds.shards().size();
  mix(&shards, sizeof shards);
  for (const auto& s : ds.shards()) {
    mix(&s.begin, sizeof s.begin);
    mix(&s.end, sizeof s.end);
  }
  const uint64_t k = std::min<uint64_t>(n, 16);
  for (uint64_t i = 0; i < k; ++i) mix_str(ds.Key(k > 1 ? i * (n - 1) / (k - 1) : 0));
  return fmt::format("{:016x}", h);
}

Status PipelineImpl::Init() {
  clock_ = opts_.clock ? opts_.clock : Clock::Real();
  // Ranges and choices from the options table, with messages naming the option.
  STOKER_RETURN_IF_ERROR(ValidatePipelineOptions(opts_));
  STOKER_ASSIGN_OR_RETURN(rank_, ResolveRank(opts_.rank, opts_.world_size));
  STOKER_ASSIGN_OR_RETURN(
      cache_, OpenPipelineCache(opts_, opts_.dataset.env ? opts_.dataset.env : Env::Default()));
  if (cache_) opts_.dataset.env = cache_.get();
  STOKER_ASSIGN_OR_RETURN(ds_, OpenDataset(opts_.data, opts_.dataset));
  plan_.shuffle = opts_.shuffle;
  plan_.global_shuffle = ds_->random_access_is_cheap();
  plan_.seed = opts_.seed;
  if (opts_.shuffle && opts_.shuffle_buffer_mb > 0 && !plan_.global_shuffle) {
    // A stream source holds what the buffer reads ahead: bound it in bytes too.
    if (double per = ds_->sample_bytes_estimate(); per > 0) {
      const double budget = static_cast<double>(opts_.shuffle_buffer_mb) * (1 << 20);
      const size_t cap = static_cast<size_t>(std::max(1.0, std::floor(budget / per)));
      if (cap < opts_.shuffle_buffer) {
        std::string why = fmt::format(
            "shuffle buffer {} -> {} samples: shuffle_buffer_mb={} of ~{:.0f} KB samples",
            opts_.shuffle_buffer, cap, opts_.shuffle_buffer_mb, per / 1024);
        opts_.shuffle_buffer = cap;  // options() reports the buffer in effect
        MutexLock l(&stats_mu_);
        tuning_.push_back({0.0, why});
      }
    }
  }
  plan_.shuffle_buffer = opts_.shuffle_buffer;
  {
    const Dataset::Interleave il = ds_->interleave();
    if (opts_.interleave < 0) opts_.interleave = static_cast<int64_t>(il.block);
    if (opts_.interleave_cycle < 0)
      opts_.interleave_cycle = static_cast<int64_t>(std::max<size_t>(1, il.cycle));
    if (opts_.interleave == 0) opts_.interleave_cycle = 1;  // what is in effect
    plan_.interleave = static_cast<size_t>(opts_.interleave);
    plan_.interleave_cycle = static_cast<size_t>(opts_.interleave_cycle);
  }
  plan_.rank = rank_.rank;
  plan_.world_size = rank_.world_size;
  plan_.balance = opts_.balance;
  if (ds_->size() == 0) return InvalidArgument("{}: the dataset is empty", opts_.data);
  if (!cache_ && rank_.world_size > 1 && !ds_->shards().empty() &&
      IsObjectStoreUri(ds_->shards()[0].path) && !ds_->random_access_is_cheap())
    Warn(fmt::format(
        "rank {} of {} reads {} without a node cache: the rank split is strided, so every "
        "rank fetches the blocks of every shard (the whole dataset, per rank); give the "
        "ranks of a node a shared cache_dir (--cache-dir, a RAM disk or NVMe) to fetch each "
        "shard once per node (docs/remote-storage.md)",
        rank_.rank, rank_.world_size, opts_.data));
  per_rank_ = SamplesPerRank(ds_->size(), rank_.world_size, opts_.balance);
  if (per_rank_ == 0)
    return InvalidArgument("{}: {} samples are fewer than the world size {}", opts_.data,
                           ds_->size(), rank_.world_size);
  num_batches_ = opts_.drop_last ? per_rank_ / opts_.batch_size
                                 : (per_rank_ + opts_.batch_size - 1) / opts_.batch_size;
  if (num_batches_ == 0)
    return InvalidArgument("{} samples per rank make no full batch of {} with drop_last",
                           per_rank_, opts_.batch_size);
  if (opts_.drop_last) per_rank_ = num_batches_ * opts_.batch_size;
  fingerprint_ = DatasetFingerprint(*ds_);

  opts_.output.width = opts_.output.height = opts_.image_size;
  image_bytes_ = opts_.mode == DecodeMode::kRaw ? 0 : opts_.output.bytes();
  size_t batch_bytes = image_bytes_ * opts_.batch_size;

  // Budgets: explicit options, else this rank's share of the node (node_share.h).
  STOKER_ASSIGN_OR_RETURN(
      node_budget_, NodeBudget::Create(opts_, rank_, int64_t(4) * batch_bytes + (256 << 20)));
  cpu_budget_ = node_budget_->budgets().cpus;
  memory_budget_ = node_budget_->budgets().memory;
  {
    MutexLock l(&stats_mu_);
    budget_why_ = node_budget_->budgets().why;
    if (node_budget_->budgets().shared) tuning_.push_back({0.0, budget_why_});
  }
  // Batches: window (prefetch + 1 in production) plus one held by the consumer.
  int64_t per_batch = std::max<int64_t>(1, static_cast<int64_t>(batch_bytes));
  int64_t sample_mem = int64_t(256) << 20;  // queues of samples and decoded images
  int max_prefetch = static_cast<int>(
      std::clamp<int64_t>((memory_budget_ - sample_mem) / per_batch - 2, 1, 64));
  if (opts_.prefetch > 0 && opts_.prefetch > max_prefetch && batch_bytes > 0)
    return InvalidArgument(
        "prefetch {} batches of {:.0f} MB do not fit the memory budget of {:.0f} MB", opts_.prefetch,
        batch_bytes / 1e6, memory_budget_ / 1e6);

  autotune_ = opts_.threads == 0 || opts_.prefetch == 0;
  // A fixed thread count means N fused workers (what DataLoader's num_workers and DALI's
  // num_threads mean); auto runs read threads (sized for storage latency) in front of
  // compute threads (sized to the CPU budget), both tuned.
  // A stream source (Kafka: reads serialized per partition, max_read_threads() > 0) whose
  // samples are carried raw runs fused too: there is nothing to decode, and the hand-off
  // from read threads to a compute thread cost more than the sample itself (1 KB Kafka
  // messages: 110k/s auto, 242k/s with 2 fused workers, bench/RESULTS.md).
  const bool stream_raw = opts_.threads == 0 && opts_.mode == DecodeMode::kRaw &&
                          ds_->max_read_threads() > 0;
  fused_ = opts_.fused || opts_.threads > 0 || stream_raw;
  auto_threads_ = !fused_;
  int budget_threads = std::max(1, cpu_budget_.load());
  std::vector<TunableInt> th(2);  // [0] read (I/O), [1] compute (decode + augment)
  th[0].autotune = th[1].autotune = opts_.threads == 0 && !fused_;
  th[0].max = std::max(16, budget_threads * 2);
  if (int m = ds_->max_read_threads(); m > 0) th[0].max = std::min(th[0].max, m);
  th[1].max = std::max(budget_threads, node_budget_->max_cpus());
  th[0].value = 1;
  th[1].value = budget_threads;
  if (fused_) {
    th[0].value = th[0].max = opts_.threads > 0 ? opts_.threads : budget_threads;
    if (stream_raw) th[0].value = th[0].max = std::min(th[0].max, ds_->max_read_threads());
    th[1].value = th[1].max = 0;
    raw_runs_ = opts_.mode == DecodeMode::kRaw && ds_->CanReadRawRun(opts_.raw_field);
  }
  TunableInt pf;
  pf.autotune = opts_.prefetch == 0;
  pf.min = 1;
  pf.max = max_prefetch;
  pf.value = opts_.prefetch > 0 ? opts_.prefetch : std::min(2, max_prefetch);
  targets_.Init(kRead, th[0].max, th[0].value);
  targets_.Init(kDecode, th[1].max, th[1].value);
  tuner_ = std::make_unique<Autotuner>(th, pf);
  board_ = std::make_unique<ActivityBoard>(targets_.max(kRead) + targets_.max(kDecode));

  pool_ = std::make_shared<BatchPool>(opts_.allocator ? opts_.allocator : HostAllocator::Default(),
                                      batch_bytes, PoolBudget(pf.value),
                                      [this](const std::string& m) { Warn(m); });
  BatchAssembler::Layout lay;
  lay.batch_size = opts_.batch_size;
  lay.image_bytes = image_bytes_;
  lay.image_size = opts_.image_size;
  lay.layout = opts_.output.layout;
  lay.raw = opts_.mode == DecodeMode::kRaw;
  lay.fail_on_error = opts_.on_error == ErrorPolicy::kFail;
  asm_ = std::make_unique<BatchAssembler>(lay, pool_.get(), clock_, &stop_, &sc_[kBatchStage]);
  asm_->SetPrefetch(pf.value);
  return Status::OK();
}

void PipelineImpl::Warn(const std::string& msg) {
  {
    MutexLock l(&stats_mu_);
    if (warnings_.size() < 1000) warnings_.push_back(msg);
  }
  if (opts_.log) opts_.log(msg);
}

Status PipelineImpl::StartEpoch(int epoch, uint64_t start_batch) {
  StopWorkers();
  if (epoch < 0) return InvalidArgument("epoch must be >= 0");
  if (start_batch > num_batches_)
    return InvalidArgument("start batch {} is past the epoch's {} batches", start_batch,
                           num_batches_);
  // Every rank has delivered start_batch batches: the global prefix they consumed.
  uint64_t consumed = std::min<uint64_t>(
      ds_->size(), start_batch * opts_.batch_size * static_cast<uint64_t>(rank_.world_size));
  return StartPass(epoch, consumed, start_batch);
}

Status PipelineImpl::ResumeEpoch(int epoch, uint64_t consumed) {
  StopWorkers();
  if (epoch < 0) return InvalidArgument("epoch must be >= 0");
  if (consumed > ds_->size())
    return InvalidArgument("{} samples consumed is past the epoch's {} samples", consumed,
                           ds_->size());
  uint64_t step = static_cast<uint64_t>(opts_.batch_size) * rank_.world_size;
  return StartPass(epoch, consumed, consumed / step);
}

Status PipelineImpl::StartPass(int epoch, uint64_t consumed, uint64_t index_base) {
  if (!detached_.empty())
    return Status(StatusCode::kCancelled,
                  fmt::format("the pipeline was stopped while {}; create a new pipeline", detached_));
  next_pending_ = next_warned_ = false;
  STOKER_ASSIGN_OR_RETURN(order_, PlanEpoch(ds_->shards(), ds_->size(), epoch, plan_, consumed));
  // This rank's share of the remainder; drop_last drops its final partial batch.
  uint64_t per = order_.size();
  uint64_t nb = opts_.drop_last ? per / opts_.batch_size
                                : (per + opts_.batch_size - 1) / opts_.batch_size;
  if (opts_.drop_last) per = nb * opts_.batch_size;
  order_.resize(per);
  if (cache_) cache_->SetPlan(CachePlanFromOrder(*ds_, order_));
  {
    Dataset::PassHint hint;
    hint.shard_order = ShardOrder(ds_->shards(), ds_->size(), epoch, plan_);
    hint.side_by_side = ShardsSideBySide(plan_);
    hint.reads = &order_;
    hint.rank = rank_.rank;
    hint.world_size = rank_.world_size;
    ds_->HintPass(hint);
  }
  PlanObjectLookahead();
  epoch_ = epoch;
  pass_consumed_ = consumed;
  pass_samples_ = per;
  pass_batches_ = nb;
  asm_->Reset(epoch, index_base, per);
  stop_ = false;
  if (auto_threads_) ChooseTopology();
  size_t qcap = static_cast<size_t>(2 * targets_.max(kDecode) + 4);
  q_decode_ = std::make_unique<BoundedQueue<ItemPtr>>(qcap);
  if (t_start_ns_ == 0) t_start_ns_ = clock_->NowNanos();
  last_next_return_ns_ = 0;
  SpawnWorkers();
  started_ = true;
  return Status::OK();
}

// threads=auto: the first epoch runs read threads in front of compute threads; at each
// later epoch start the autotuner chooses the topology from what the last epoch measured
// (Autotuner::ChooseTopology). If reads get slow again, the next epoch goes back to read
// threads, which wait on storage without a core.
void PipelineImpl::ChooseTopology() {
  int64_t read_ns = sc_[kRead].busy_ns;
  int64_t cpu_ns = sc_[kDecode].cpu_ns + sc_[kAugment].cpu_ns;
  uint64_t read_items = sc_[kRead].items, items = sc_[kDecode].items;
  TopologyObservation o;
  o.epoch = epoch_;
  o.read_items = read_items - mark_read_items_;
  o.read_wall_s = (read_ns - mark_read_ns_) * 1e-9;
  o.compute_items = items - mark_compute_items_;
  o.compute_cpu_s = (cpu_ns - mark_compute_cpu_ns_) * 1e-9;
  o.fused = fused_;
  o.read_threads = targets_.target(kRead);
  o.compute_threads = targets_.target(kDecode);
  mark_read_ns_ = read_ns;
  mark_compute_cpu_ns_ = cpu_ns;
  mark_read_items_ = read_items;
  mark_compute_items_ = items;
  TopologyDecision d = tuner_->ChooseTopology(o);
  if (!d.changed) return;
  fused_ = d.fused;
  targets_.Set(kRead, d.read_threads);
  targets_.Set(kDecode, d.compute_threads);
  MutexLock l(&stats_mu_);
  if (tuning_.size() < 1000)
    tuning_.push_back({(clock_->NowNanos() - t_start_ns_) * 1e-9, d.reason});
}

template <typename Body>
void PipelineImpl::SpawnWorker(std::string name, Body body) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  done_.push_back(done);
  // The thread keeps the pipeline alive: a worker detached by Stop() (blocked in a read)
  // still finds everything it touches when the read returns.
  workers_.emplace_back([self = shared_from_this(), done, name = std::move(name), body] {
    SetThreadName(name);
    body();
    MutexLock l(&self->exit_mu_);
    done->store(true);
    self->exit_cv_.SignalAll();
  });
}

void PipelineImpl::SpawnWorkers() {
  for (int i = 0; i < targets_.max(kRead); ++i)
    SpawnWorker("stk-read-" + std::to_string(i), [this, i] {
      if (fused_ && raw_runs_) {
        RunLoop(i);
      } else {
        ReadLoop(i);
      }
    });
  for (int i = 0; i < (fused_ ? 0 : targets_.max(kDecode)); ++i)
    SpawnWorker("stk-compute-" + std::to_string(i), [this, i] { DecodeLoop(i); });
  if (autotune_) tuner_thread_ = std::thread([this] {
    SetThreadName("stk-tuner");
    TunerLoop();
  });
}

void PipelineImpl::StopWorkers(int64_t grace_ns) {
  stop_ = true;
  if (asm_) asm_->WakeAll();
  targets_.WakeAll();
  {
    MutexLock l(&tuner_mu_);
    tuner_cv_.SignalAll();
  }
  if (q_decode_) q_decode_->Close();
  if (tuner_thread_.joinable()) tuner_thread_.join();
  if (grace_ns >= 0 && !workers_.empty()) {
    auto all_done = [&] {
      for (auto& d : done_)
        if (!d->load()) return false;
      return true;
    };
    const int64_t deadline = Clock::Real()->NowNanos() + grace_ns;
    MutexLock l(&exit_mu_);
    while (!all_done()) {
      int64_t left = deadline - Clock::Real()->NowNanos();
      if (left <= 0) break;
      exit_cv_.WaitForNanos(&exit_mu_, left);
    }
  }
  int stuck = 0;
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (grace_ns < 0 || done_[i]->load()) {
      workers_[i].join();
    } else {
      workers_[i].detach();
      ++stuck;
    }
  }
  if (stuck > 0) {
    // Name what they are blocked on, from the activity board.
    int64_t now = clock_->NowNanos();
    std::string what;
    for (const auto& e : board_->Busy())
      what += fmt::format("{}{} of sample '{}' ({}) for {:.1f} s", what.empty() ? "" : "; ",
                          kStageNames[e.stage], ds_->Key(e.index), ds_->Location(e.index),
                          (now - e.since_ns) * 1e-9);
    detached_ = fmt::format("{} worker(s) were blocked in {}", stuck, what.empty() ? "a read" : what);
    Warn(fmt::format("stop: {}; detached, they exit when their read returns", detached_));
  }
  workers_.clear();
  done_.clear();
  // Recycle anything left in the queues.
  if (q_decode_)
    while (auto it = q_decode_->TryPop()) PutItem(std::move(*it));
}

void PipelineImpl::Stop() {
  StopWorkers(/*grace_ns=*/1'000'000'000);
  if (asm_) asm_->Clear();
}

// Shards of an object store read from their head (WebDataset tars, TFRecord files: formats
// read front to back) get their first blocks fetched while the shards before them are read.
// The node cache does this itself from the plan; ranks warm their own spans (a rank's first
// sample of a shard is within its first few samples).
void PipelineImpl::PlanObjectLookahead() {
  ahead_due_.store(UINT64_MAX, std::memory_order_relaxed);
  std::vector<uint64_t> first;
  std::vector<std::string> url;
  const auto& shards = ds_->shards();
  const std::string fmt = ds_->format();
  if (!cache_ && !order_.empty() && !shards.empty() && IsObjectStoreUri(shards[0].path) &&
      (fmt == "wds" || fmt == "tfrecord")) {
    const uint64_t near_head = 4ull * static_cast<uint64_t>(std::max(1, rank_.world_size));
    for (const auto& span : CachePlanFromOrder(*ds_, order_)) {
      uint64_t idx = order_[span.first];
      auto sh = std::upper_bound(shards.begin(), shards.end(), idx,
                                 [](uint64_t i, const ShardInfo& s) { return i < s.end; });
      bool head = sh != shards.end() && idx >= sh->begin && idx - sh->begin < near_head;
      first.push_back(span.first);
      url.push_back(head ? span.path : std::string());
    }
  }
  {
    MutexLock l(&ahead_mu_);
    ahead_first_ = std::move(first);
    ahead_url_ = std::move(url);
    ahead_hinted_ = 0;
  }
  HintAhead(0);
}

void PipelineImpl::HintAhead(uint64_t pos) {
  MutexLock l(&ahead_mu_);
  if (ahead_first_.empty()) return;
  // The span being read: the last that starts at or before pos.
  size_t cur = static_cast<size_t>(
      std::upper_bound(ahead_first_.begin(), ahead_first_.end(), pos) - ahead_first_.begin());
  cur = cur ? cur - 1 : 0;
  size_t upto = std::min(ahead_first_.size(), cur + 1 + kAheadSpans);
  for (size_t i = ahead_hinted_; i < upto; ++i)
    if (!ahead_url_[i].empty()) PrefetchObject(ahead_url_[i], 0);
  ahead_hinted_ = std::max(ahead_hinted_, upto);
  ahead_due_.store(cur + 1 < ahead_first_.size() ? ahead_first_[cur + 1] : UINT64_MAX,
                   std::memory_order_relaxed);
}

void PipelineImpl::ReadLoop(int id) {
  StageCounters& c = sc_[kRead];
  ResizeScratch scratch;  // fused mode
  WorkerMeters meters;
  const int worker = id;
  int64_t done_at = -1;  // fused: when the last item's augment ended (one clock read less)
  for (;;) {
    if (!WaitActive(kRead, id)) break;
    ItemPtr it = GetItem();
    int64_t t0 = done_at >= 0 ? done_at : clock_->NowNanos();
    done_at = -1;
    BatchAssembler::Admit a = asm_->Next([&] { return Active(kRead, id); }, it.get());
    int64_t t1 = clock_->NowNanos();
    c.wait_out_ns += t1 - t0;
    if (a != BatchAssembler::Admit::kOk) {
      PutItem(std::move(it));
      if (a == BatchAssembler::Admit::kInactive) continue;
      break;  // stopping, or every position handed out
    }
    it->index = order_[it->pos];
    if (it->pos >= ahead_due_.load(std::memory_order_relaxed)) HintAhead(it->pos);
    t0 = t1;
    board_->Begin(worker, kRead, it->index, t0);
    meters.read.Begin(clock_);
    Status st = ds_->Read(it->index, &it->sample);
    c.cpu_ns += meters.read.Charge(clock_);
    int64_t now = clock_->NowNanos();
    c.busy_ns += now - t0;
    board_->End(worker);
    if (stop_) {  // stopped during the read (maybe detached): touch no batch
      PutItem(std::move(it));
      break;
    }
    c.items++;
    c.bytes += it->sample.bytes();
    if (!st.ok()) {
      if (it->sample.location.empty()) it->sample.location = ds_->Location(it->index);
      if (it->sample.key.empty()) it->sample.key = ds_->Key(it->index);
      FinishItem(it.get(), st);
      PutItem(std::move(it));
      continue;
    }
    if (fused_) {
      // One thread runs every stage for its sample: no hand-off between threads.
      if (DoDecode(it.get(), worker, &meters.decode, &now)) {
        DoAugment(it.get(), worker, &scratch, &meters.augment, &now);
        done_at = now;
      }
      PutItem(std::move(it));
      continue;
    }
    t1 = now;
    c.fill_samples++;
    c.fill_sum_permille += q_decode_->size() * 1000 / std::max<size_t>(1, q_decode_->capacity());
    if (!q_decode_->Push(std::move(it))) break;
    c.wait_out_ns += clock_->NowNanos() - t1;
  }
}

// Where a raw run's samples go (PipelineImpl::RunLoop): each delivered sample's bytes
// straight into the batch's contiguous buffer, in order (the one copy: from the source's
// buffer), its key, label and dataset index into its slot. Holds the batch (BatchPtr): a
// worker that Stop() detached in a read writes into a buffer still alive.
class BatchRunSink final : public RawRunSink {
 public:
  BatchRunSink(const BatchAssembler::Run& run, const uint64_t* indices)
      : batch_(run.bs->batch), indices_(indices), n_(static_cast<size_t>(run.n)) {}
  void Deliver(size_t i, std::string_view key, const uint8_t* data, size_t size) override {
    Batch& bt = *batch_;
    bt.keys[i].assign(key);
    bt.labels[i] = -1;  // one field of bytes: no label
    bt.sample_indices[i] = indices_[i];
    if (used_ + size > bt.raw.size()) {
      // Room for the rest of the run at this sample's size (a fresh buffer grows once, not
      // by doubling: each step is fresh pages and a copy); a batch buffer keeps its size
      // between uses, so in steady state this is rare.
      bt.raw.resize(std::max({used_ + size * (n_ - i), bt.raw.size() + bt.raw.size() / 4}));
    }
    bt.raw_offsets.push_back(used_);
    if (size) std::memcpy(bt.raw.data() + used_, data, size);
    used_ += size;
  }
  void Fail(size_t i, const Status& st) override { failed_.emplace_back(static_cast<int>(i), st); }
  // After the run: the batch's bytes end where the run's do.
  void Close() {
    batch_->raw_offsets.push_back(used_);
    batch_->raw.resize(used_);
  }
  uint64_t bytes() const { return used_; }
  std::vector<std::pair<int, Status>>& failed() { return failed_; }

 private:
  BatchPtr batch_;
  const uint64_t* indices_;
  const size_t n_;  // samples in the run
  size_t used_ = 0;
  std::vector<std::pair<int, Status>> failed_;
};

// One admission, one ReadRawRun and one set of clock reads per batch instead of per sample;
// no Item, no Sample: the bytes go from the source's buffer into the batch (BatchRunSink).
// The stage counters count the run's samples; decode and augment have nothing to do.
void PipelineImpl::RunLoop(int id) {
  StageCounters& c = sc_[kRead];
  CpuMeter meter;
  const int worker = id;
  std::vector<uint64_t> indices;
  int64_t done_at = -1;  // when the last run ended (one clock read less)
  for (;;) {
    if (!WaitActive(kRead, id)) break;
    int64_t t0 = done_at >= 0 ? done_at : clock_->NowNanos();
    done_at = -1;
    BatchAssembler::Run run;
    BatchAssembler::Admit a =
        asm_->NextRun([&] { return Active(kRead, id); }, &run);
    int64_t t1 = clock_->NowNanos();
    c.wait_out_ns += t1 - t0;
    if (a != BatchAssembler::Admit::kOk) {
      if (a == BatchAssembler::Admit::kInactive) continue;
      break;  // stopping, or every position handed out
    }
    indices.assign(order_.begin() + static_cast<ptrdiff_t>(run.pos),
                   order_.begin() + static_cast<ptrdiff_t>(run.pos + run.n));
    const uint64_t last = run.pos + static_cast<uint64_t>(run.n) - 1;
    if (last >= ahead_due_.load(std::memory_order_relaxed)) HintAhead(last);
    board_->Begin(worker, kRead, indices[0], t1);
    meter.Begin(clock_);
    BatchRunSink sink(run, indices.data());
    ds_->ReadRawRun(indices.data(), static_cast<size_t>(run.n), &sink);
    sink.Close();
    c.cpu_ns += meter.Charge(clock_);
    int64_t now = clock_->NowNanos();
    c.busy_ns += now - t1;
    board_->End(worker);
    if (stop_) break;  // stopped during the read (maybe detached): touch no batch state
    const uint64_t n = static_cast<uint64_t>(run.n);
    c.items += n;
    c.bytes += sink.bytes();
    sc_[kDecode].items += n;
    sc_[kAugment].items += n;
    sc_[kAugment].bytes += sink.bytes();
    for (auto& [i, st] : sink.failed()) {
      const uint64_t index = indices[static_cast<size_t>(i)];
      st = SampleError(ds_->Key(index), ds_->Location(index), st);
    }
    asm_->FinishRun(run, sink.failed());
    done_at = now;
  }
}

// Runs the decode stage on one item with its metrics; false if the item was finished
// (failed) here.
bool PipelineImpl::DoDecode(Item* it, int worker, CpuMeter* meter, int64_t* now) {
  StageCounters& c = sc_[kDecode];
  int64_t t1 = *now;
  board_->Begin(worker, kDecode, it->index, t1);
  meter->Begin(clock_);
  Status st = DecodeSample(opts_, epoch_, it);
  c.cpu_ns += meter->Charge(clock_);
  // kRaw decodes nothing (the label's parse): its time goes to augment's, one read less.
  if (opts_.mode != DecodeMode::kRaw) *now = clock_->NowNanos();
  c.busy_ns += *now - t1;
  board_->End(worker);
  c.items++;
  c.bytes += static_cast<uint64_t>(it->image.width) * it->image.height * 3;
  if (!st.ok()) {
    FinishItem(it, st);
    return false;
  }
  return true;
}

void PipelineImpl::DoAugment(Item* it, int worker, ResizeScratch* scratch, CpuMeter* meter,
                             int64_t* now) {
  StageCounters& c = sc_[kAugment];
  int64_t t1 = *now;
  board_->Begin(worker, kAugment, it->index, t1);
  meter->Begin(clock_);
  // The slot was reserved at admission: no lookup, no lock.
  BatchState& bs = *it->bs;
  std::vector<uint8_t>* raw_dst = opts_.mode == DecodeMode::kRaw ? &bs.raw_slots[it->slot] : nullptr;
  void* dst = raw_dst ? nullptr : static_cast<uint8_t*>(bs.batch->images) + it->slot * image_bytes_;
  size_t bytes = 0;
  Status st = AugmentSample(opts_, it, dst, raw_dst, scratch, &bytes);
  c.cpu_ns += meter->Charge(clock_);
  *now = clock_->NowNanos();
  c.busy_ns += *now - t1;
  board_->End(worker);
  c.items++;
  c.bytes += bytes;
  FinishItem(it, st);
}

void PipelineImpl::DecodeLoop(int id) {
  StageCounters& c = sc_[kDecode];
  ResizeScratch scratch;
  WorkerMeters meters;
  const int worker = targets_.max(kRead) + id;
  for (;;) {
    if (!WaitActive(kDecode, id)) break;
    int64_t t0 = clock_->NowNanos();
    c.fill_samples++;
    c.fill_sum_permille += q_decode_->size() * 1000 / std::max<size_t>(1, q_decode_->capacity());
    auto got = q_decode_->Pop();
    int64_t now = clock_->NowNanos();
    c.wait_in_ns += now - t0;
    if (!got) break;
    ItemPtr it = std::move(*got);
    // Augment on the same thread, while the decoded image is in this core's cache.
    if (DoDecode(it.get(), worker, &meters.decode, &now))
      DoAugment(it.get(), worker, &scratch, &meters.augment, &now);
    PutItem(std::move(it));
  }
}

Status PipelineImpl::SampleError(const std::string& key, const std::string& location,
                                 const Status& st) {
  Status err(st.code(), fmt::format("sample '{}' ({}): {}", key, location, st.message()));
  if (opts_.on_error == ErrorPolicy::kSkip) {
    MutexLock l(&stats_mu_);
    skipped_count_++;
    if (skipped_.size() < 10000) skipped_.push_back(err.message());
  }
  return err;
}

void PipelineImpl::FinishItem(Item* it, const Status& st) {
  Status err;
  if (!st.ok()) {
    err = SampleError(
        it->sample.key.empty() ? ds_->Key(it->index) : it->sample.key,
        it->sample.location.empty() ? ds_->Location(it->index) : it->sample.location, st);
  }
  asm_->Finish(it, err);
}

Result<BatchPtr> PipelineImpl::NextWithin(int64_t max_wait_ns, bool* timed_out) {
  *timed_out = false;
  if (!started_) return InvalidArgument("call StartEpoch before Next");
  // A call after a timed-out one continues that wait.
  const bool resumed = next_pending_;
  next_pending_ = false;
  int64_t enter = resumed ? next_enter_ns_ : clock_->NowNanos();
  if (!resumed && last_next_return_ns_ > 0) consumer_.busy_ns += enter - last_next_return_ns_;
  const int64_t timeout_ns = static_cast<int64_t>(opts_.stall_timeout_s * 1e9);
  // With the watchdog on (or a bounded wait), the wait wakes up every so often (real time)
  // to look at the clock; a FakeClock advanced past the timeout is noticed at the next look.
  int64_t slice_ns = timeout_ns > 0 ? std::clamp<int64_t>(timeout_ns / 4, 1'000'000, 100'000'000) : 0;
  if (max_wait_ns >= 0) slice_ns = std::clamp<int64_t>(slice_ns > 0 ? std::min(slice_ns, max_wait_ns) : max_wait_ns, 1'000'000, 100'000'000);
  const int64_t real_deadline = max_wait_ns >= 0 ? Clock::Real()->NowNanos() + max_wait_ns : 0;
  BatchState bs;
  Status fatal;
  bool first = !resumed, warned = resumed && next_warned_;
  for (;;) {
    bool starved = false;
    BatchAssembler::Take t = asm_->TakeNext(&bs, &fatal, &starved, slice_ns);
    if (t == BatchAssembler::Take::kEnd) return EndOfStream();
    if (first) {
      consumer_.calls++;
      if (starved) consumer_.starved++;
      first = false;
    }
    if (t == BatchAssembler::Take::kFatal) return fatal;
    if (t == BatchAssembler::Take::kStopped) return Cancelled("pipeline stopped");
    if (t == BatchAssembler::Take::kReady) break;
    // Timed out: a stall when no batch became ready since the pass started or the consumer
    // last took one (which opened the window for another).
    int64_t now = clock_->NowNanos();
    int64_t waited = now - std::max(last_next_return_ns_, asm_->last_ready_ns());
    if (timeout_ns > 0 && waited >= timeout_ns) {
      std::string report = StallReport(now, waited);
      if (opts_.on_stall == StallAction::kFail) {
        Status st = DeadlineExceeded("{}", report);
        asm_->SetFatal(st);
        return st;
      }
      if (!warned) {  // warn: once per wait, then keep waiting
        Warn(report);
        warned = true;
      }
    }
    if (max_wait_ns >= 0 && Clock::Real()->NowNanos() >= real_deadline) {
      next_pending_ = true;
      next_warned_ = warned;
      next_enter_ns_ = enter;
      *timed_out = true;
      return BatchPtr();
    }
  }
  int64_t now = clock_->NowNanos();
  consumer_.wait_ns += now - enter;
  last_next_return_ns_ = now;
  if (!bs.error.ok()) {
    asm_->SetFatal(bs.error);
    StopWorkers();
    return bs.error;
  }
  if (pool_->alloc_failed(bs.batch))
    return Status(StatusCode::kInternal, "out of memory allocating a batch buffer");
  samples_out_ += bs.batch->size;
  batches_out_++;
  return std::move(bs.batch);
}

// "no batch for 301.0 s (stall timeout 300 s) ...; stk-read-0: read of sample 'k' (file) for
// 301.0 s; ...". Names every busy worker; idle ones are counted.
std::string PipelineImpl::StallReport(int64_t now, int64_t waited_ns) const {
  std::string s = fmt::format(
      "stalled: no batch for {:.1f} s (stall timeout {:g} s); the consumer waits for batch {} "
      "of epoch {}",
      waited_ns * 1e-9, opts_.stall_timeout_s, asm_->consumer_batch(), epoch_);
  auto busy = board_->Busy();
  const int readers = targets_.max(kRead);
  for (const auto& e : busy) {
    std::string name = e.worker < readers ? fmt::format("stk-read-{}", e.worker)
                                          : fmt::format("stk-compute-{}", e.worker - readers);
    s += fmt::format("; {}: {} of sample '{}' ({}) for {:.1f} s", name, kStageNames[e.stage],
                     ds_->Key(e.index), ds_->Location(e.index), (now - e.since_ns) * 1e-9);
  }
  if (busy.empty()) s += "; no worker is busy (they wait for admission or input)";
  else if (static_cast<int>(busy.size()) < board_->size())
    s += fmt::format("; {} other workers idle", board_->size() - static_cast<int>(busy.size()));
  return s;
}

void PipelineImpl::TunerLoop() {
  const int64_t period_ns = 100'000'000;  // 100 ms on the pipeline's clock
  TunerSampler sampler(sc_, consumer_, clock_->NowNanos());
  for (;;) {
    {
      // Sleeps (real time) for what is left of the period on the clock; a FakeClock that
      // has not moved is looked at again a period later, so tests decide when steps run.
      int64_t left = period_ns - (clock_->NowNanos() - sampler.last_ns());
      MutexLock l(&tuner_mu_);
      if (!stop_ && left > 0) tuner_cv_.WaitForNanos(&tuner_mu_, std::clamp<int64_t>(left, 1'000'000, period_ns));
      if (stop_) return;
    }
    int64_t now = clock_->NowNanos();
    if (now - sampler.last_ns() < period_ns) continue;
    std::string budget_change;
    if (node_budget_->Refresh(now, &budget_change)) {
      cpu_budget_ = node_budget_->budgets().cpus;
      MutexLock l(&stats_mu_);
      budget_why_ = node_budget_->budgets().why;
      tuning_.push_back({(now - t_start_ns_) * 1e-9, budget_change});
    }
    AutotuneSnapshot snap = sampler.Take(now, cpu_budget_, opts_.batch_size);
    std::vector<std::string> reasons;
    if (tuner_->Step(snap, &reasons)) {
      if (opts_.threads == 0 && !fused_) {
        targets_.Set(kRead, tuner_->threads(0));
        targets_.Set(kDecode, tuner_->threads(1));
      }
      if (opts_.prefetch == 0 && tuner_->prefetch() != asm_->prefetch()) {
        pool_->SetBudget(PoolBudget(tuner_->prefetch()));
        asm_->SetPrefetch(tuner_->prefetch());
      }
      MutexLock l(&stats_mu_);
      double t = (now - t_start_ns_) * 1e-9;
      for (auto& r : reasons)
        if (tuning_.size() < 1000) tuning_.push_back({t, r});
    }
  }
}

PipelineStats PipelineImpl::Stats() const {
  PipelineStats st;
  int64_t now = clock_->NowNanos();
  st.wall_s = t_start_ns_ ? (now - t_start_ns_) * 1e-9 : 0;
  st.samples = samples_out_;
  st.batches = batches_out_;
  st.bytes_read = sc_[kRead].bytes;
  if (st.wall_s > 0) {
    st.samples_per_s = st.samples / st.wall_s;
    st.mb_per_s = st.bytes_read / st.wall_s / 1e6;
  }
  StageTopology topo;
  topo.fused = fused_;
  topo.read_threads = targets_.target(kRead);
  topo.compute_threads = targets_.target(kDecode);
  SummarizeStages(sc_, topo, st.wall_s, consumer_, &st);
  st.prefetch = asm_->prefetch();
  st.memory_budget = memory_budget_;
  st.cpu_budget = cpu_budget_;
  st.buffer_bytes = pool_ ? pool_->allocated_bytes() : 0;
  st.autotune = autotune_;
  st.rank = rank_;
  if (cache_) st.cache = CacheStatsOf(*cache_);
  st.source_notes = ds_->notes();
  st.source_counters = ds_->counters();
  if (!ds_->shards().empty() && IsObjectStoreUri(ds_->shards()[0].path)) {
    // Process-wide (every object read of this process, not only this pipeline's).
    ObjectStoreCounters oc = GetObjectStoreCounters();
    ObjectPrefetchCounters pc = GetObjectPrefetchCounters();
    auto& c = st.source_counters;
    c["object_store.get_requests"] = static_cast<double>(oc.get_requests);
    c["object_store.bytes_read"] = static_cast<double>(oc.bytes_read);
    c["object_store.head_requests"] = static_cast<double>(oc.head_requests);
    c["object_store.retries"] = static_cast<double>(oc.retries);
    c["object_store.next_shard_warmups"] = static_cast<double>(pc.hints);
    c["object_store.next_shard_warmups_taken"] = static_cast<double>(pc.adopted);
  }
  MutexLock l(&stats_mu_);
  st.skipped = skipped_count_;
  st.budget_source = budget_why_;
  st.skipped_items = skipped_;
  st.tuning = tuning_;
  st.warnings = warnings_;
  return st;
}

}  // namespace

namespace {

// What Create() hands out: owns the pipeline with the worker threads, each of which holds a
// reference too, so that a worker detached by Stop() (blocked in a read) outlives the handle
// safely. Forwards every call.
class PipelineHandle final : public Pipeline {
 public:
  explicit PipelineHandle(std::shared_ptr<PipelineImpl> p) : p_(std::move(p)) {}
  ~PipelineHandle() override { p_->Stop(); }
  Status StartEpoch(int epoch, uint64_t start_batch) override { return p_->StartEpoch(epoch, start_batch); }
  Status ResumeEpoch(int epoch, uint64_t consumed) override { return p_->ResumeEpoch(epoch, consumed); }
  Result<BatchPtr> NextWithin(int64_t max_wait_ns, bool* timed_out) override {
    return p_->NextWithin(max_wait_ns, timed_out);
  }
  void Stop() override { p_->Stop(); }
  uint64_t batches_per_epoch() const override { return p_->batches_per_epoch(); }
  uint64_t samples_per_epoch() const override { return p_->samples_per_epoch(); }
  uint64_t pass_batches() const override { return p_->pass_batches(); }
  uint64_t ConsumedAfter(uint64_t batches) const override { return p_->ConsumedAfter(batches); }
  std::string Fingerprint() const override { return p_->Fingerprint(); }
  const Dataset& dataset() const override { return p_->dataset(); }
  PipelineStats Stats() const override { return p_->Stats(); }
  const PipelineOptions& options() const override { return p_->options(); }
  Result<std::vector<uint64_t>> EpochOrder(int epoch) const override { return p_->EpochOrder(epoch); }

 private:
  std::shared_ptr<PipelineImpl> p_;
};

}  // namespace

Result<std::unique_ptr<Pipeline>> Pipeline::Create(const PipelineOptions& opts) {
  auto p = std::make_shared<PipelineImpl>(opts);
  STOKER_RETURN_IF_ERROR(p->Init());
  return std::unique_ptr<Pipeline>(std::make_unique<PipelineHandle>(std::move(p)));
}

}  // namespace stoker
