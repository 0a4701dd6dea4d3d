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
// PipelineImpl below owns the threads: it validates options, spawns and parks workers, runs
// the tuner loop and the watchdog, and computes the stats.
//
// Admission bounds batch memory; Q is bounded, which bounds sample memory; augment never
// blocks on output (its slot is reserved), so the graph cannot deadlock. Items, samples and
// decoded images are recycled through free lists, batch buffers through the pool, so
// steady state touches no fresh pages.
#include "pipeline/pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/mutex.h"
#include "core/queue.h"
#include "core/thread_pool.h"
#include "pipeline/autotune.h"
#include "pipeline/batch_assembler.h"
#include "pipeline/batch_pool.h"
#include "pipeline/cache_plan.h"
#include "pipeline/node_share.h"
#include "pipeline/options_schema.h"
#include "pipeline/plan.h"
#include "pipeline/sample_ops.h"
#include "pipeline/stages.h"
#include "pipeline/watchdog.h"

namespace stoker {
namespace {

using ItemPtr = std::unique_ptr<Item>;

class PipelineImpl final : public Pipeline {
 public:
  explicit PipelineImpl(const PipelineOptions& o) : opts_(o) {}
  ~PipelineImpl() override { Stop(); }

  Status Init();
  Status StartEpoch(int epoch, uint64_t start_batch) override;
  Status ResumeEpoch(int epoch, uint64_t consumed) override;
  Result<BatchPtr> Next() override;
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
  void StopWorkers();
  void SpawnWorkers();
  void ReadLoop(int id);
  void DecodeLoop(int id);
  bool DoDecode(Item* it, int worker);
  void DoAugment(Item* it, int worker, ResizeScratch* scratch);
  void TunerLoop();
  bool Active(int stage, int id) const {
    return id < target_atomic_[stage].load(std::memory_order_relaxed);
  }
  bool WaitActive(int stage, int id) EXCLUDES(thr_mu_);  // false when stopping
  void ApplyThreads(int stage, int n) EXCLUDES(thr_mu_);
  void ChooseTopology() EXCLUDES(thr_mu_, stats_mu_);
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
  Mutex thr_mu_;
  CondVar thr_cv_;
  int target_[kNumStages] GUARDED_BY(thr_mu_) = {1, 1, 1, 1};
  std::atomic<int> target_atomic_[kNumStages];
  int max_threads_[kNumStages] = {1, 1, 1, 1};
  std::vector<std::thread> workers_;
  std::thread tuner_thread_;
  Mutex tuner_mu_;
  CondVar tuner_cv_;

  // Metrics.
  StageCounters sc_[kNumStages];
  std::atomic<uint64_t> samples_out_{0}, batches_out_{0};
  std::atomic<int64_t> consumer_wait_ns_{0}, consumer_busy_ns_{0};
  std::atomic<uint64_t> consumer_calls_{0}, consumer_starved_{0};
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
  plan_.shuffle_buffer = opts_.shuffle_buffer;
  plan_.rank = rank_.rank;
  plan_.world_size = rank_.world_size;
  plan_.balance = opts_.balance;
  if (ds_->size() == 0) return InvalidArgument("{}: the dataset is empty", opts_.data);
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
  fused_ = opts_.fused || opts_.threads > 0;
  auto_threads_ = !fused_;
  int budget_threads = std::max(1, cpu_budget_.load());
  std::vector<TunableInt> th(2);  // [0] read (I/O), [1] compute (decode + augment)
  th[0].autotune = th[1].autotune = opts_.threads == 0 && !fused_;
  th[0].max = std::max(16, budget_threads * 2);
  th[1].max = std::max(budget_threads, node_budget_->max_cpus());
  th[0].value = 1;
  th[1].value = budget_threads;
  if (fused_) {
    th[0].value = th[0].max = opts_.threads > 0 ? opts_.threads : budget_threads;
    th[1].value = th[1].max = 0;
  }
  TunableInt pf;
  pf.autotune = opts_.prefetch == 0;
  pf.min = 1;
  pf.max = max_prefetch;
  pf.value = opts_.prefetch > 0 ? opts_.prefetch : std::min(2, max_prefetch);
  const int stage_of[2] = {kRead, kDecode};
  {
    MutexLock l(&thr_mu_);
    for (int g = 0; g < 2; ++g) {
      int s = stage_of[g];
      max_threads_[s] = th[g].max;
      target_[s] = th[g].value;
      target_atomic_[s] = th[g].value;
    }
    max_threads_[kAugment] = max_threads_[kBatchStage] = 0;
    target_[kAugment] = 0;
    target_atomic_[kAugment] = 0;
    target_atomic_[kBatchStage] = 0;
  }
  tuner_ = std::make_unique<Autotuner>(th, pf);
  board_ = std::make_unique<ActivityBoard>(max_threads_[kRead] + max_threads_[kDecode]);

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
  STOKER_ASSIGN_OR_RETURN(order_, PlanEpoch(ds_->shards(), ds_->size(), epoch, plan_, consumed));
  // This rank's share of the remainder; drop_last drops its final partial batch.
  uint64_t per = order_.size();
  uint64_t nb = opts_.drop_last ? per / opts_.batch_size
                                : (per + opts_.batch_size - 1) / opts_.batch_size;
  if (opts_.drop_last) per = nb * opts_.batch_size;
  order_.resize(per);
  if (cache_) cache_->SetPlan(CachePlanFromOrder(*ds_, order_));
  epoch_ = epoch;
  pass_consumed_ = consumed;
  pass_samples_ = per;
  pass_batches_ = nb;
  asm_->Reset(epoch, index_base, per);
  stop_ = false;
  if (auto_threads_) ChooseTopology();
  size_t qcap = static_cast<size_t>(2 * max_threads_[kDecode] + 4);
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
  {
    MutexLock l(&thr_mu_);
    o.read_threads = target_[kRead];
    o.compute_threads = target_[kDecode];
  }
  mark_read_ns_ = read_ns;
  mark_compute_cpu_ns_ = cpu_ns;
  mark_read_items_ = read_items;
  mark_compute_items_ = items;
  TopologyDecision d = tuner_->ChooseTopology(o);
  if (!d.changed) return;
  fused_ = d.fused;
  {
    MutexLock l(&thr_mu_);
    target_[kRead] = d.read_threads;
    target_atomic_[kRead] = d.read_threads;
    target_[kDecode] = d.compute_threads;
    target_atomic_[kDecode] = d.compute_threads;
  }
  MutexLock l(&stats_mu_);
  if (tuning_.size() < 1000)
    tuning_.push_back({(clock_->NowNanos() - t_start_ns_) * 1e-9, d.reason});
}

void PipelineImpl::SpawnWorkers() {
  for (int i = 0; i < max_threads_[kRead]; ++i)
    workers_.emplace_back([this, i] {
      SetThreadName("stk-read-" + std::to_string(i));
      ReadLoop(i);
    });
  for (int i = 0; i < (fused_ ? 0 : max_threads_[kDecode]); ++i)
    workers_.emplace_back([this, i] {
      SetThreadName("stk-compute-" + std::to_string(i));
      DecodeLoop(i);
    });
  if (autotune_) tuner_thread_ = std::thread([this] {
    SetThreadName("stk-tuner");
    TunerLoop();
  });
}

void PipelineImpl::StopWorkers() {
  stop_ = true;
  if (asm_) asm_->WakeAll();
  {
    MutexLock l(&thr_mu_);
    thr_cv_.SignalAll();
  }
  {
    MutexLock l(&tuner_mu_);
    tuner_cv_.SignalAll();
  }
  if (q_decode_) q_decode_->Close();
  for (auto& t : workers_) t.join();
  workers_.clear();
  if (tuner_thread_.joinable()) tuner_thread_.join();
  // Recycle anything left in the queues.
  if (q_decode_)
    while (auto it = q_decode_->TryPop()) PutItem(std::move(*it));
}

void PipelineImpl::Stop() {
  StopWorkers();
  if (asm_) asm_->Clear();
}

bool PipelineImpl::WaitActive(int stage, int id) {
  if (Active(stage, id)) return !stop_;
  MutexLock l(&thr_mu_);
  thr_cv_.Wait(&thr_mu_, [&]() REQUIRES(thr_mu_) { return stop_.load() || id < target_[stage]; });
  return !stop_;
}

void PipelineImpl::ApplyThreads(int stage, int n) {
  n = std::clamp(n, 1, max_threads_[stage]);
  MutexLock l(&thr_mu_);
  target_[stage] = n;
  target_atomic_[stage] = n;
  thr_cv_.SignalAll();
}

void PipelineImpl::ReadLoop(int id) {
  StageCounters& c = sc_[kRead];
  ResizeScratch scratch;  // fused mode
  const int worker = id;
  for (;;) {
    if (!WaitActive(kRead, id)) break;
    ItemPtr it = GetItem();
    int64_t t0 = clock_->NowNanos();
    BatchAssembler::Admit a = asm_->Next([&] { return Active(kRead, id); }, it.get());
    c.wait_out_ns += clock_->NowNanos() - t0;
    if (a != BatchAssembler::Admit::kOk) {
      PutItem(std::move(it));
      if (a == BatchAssembler::Admit::kInactive) continue;
      break;  // stopping, or every position handed out
    }
    it->index = order_[it->pos];
    t0 = clock_->NowNanos();
    board_->Begin(worker, kRead, it->index, t0);
    int64_t c0 = clock_->ThreadCpuNanos();
    Status st = ds_->Read(it->index, &it->sample);
    c.cpu_ns += clock_->ThreadCpuNanos() - c0;
    c.busy_ns += clock_->NowNanos() - t0;
    board_->End(worker);
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
      if (DoDecode(it.get(), worker)) DoAugment(it.get(), worker, &scratch);
      PutItem(std::move(it));
      continue;
    }
    int64_t t1 = clock_->NowNanos();
    c.fill_samples++;
    c.fill_sum_permille += q_decode_->size() * 1000 / std::max<size_t>(1, q_decode_->capacity());
    if (!q_decode_->Push(std::move(it))) break;
    c.wait_out_ns += clock_->NowNanos() - t1;
  }
}

// Runs the decode stage on one item with its metrics; false if the item was finished
// (failed) here.
bool PipelineImpl::DoDecode(Item* it, int worker) {
  StageCounters& c = sc_[kDecode];
  int64_t t1 = clock_->NowNanos();
  board_->Begin(worker, kDecode, it->index, t1);
  int64_t c0 = clock_->ThreadCpuNanos();
  Status st = DecodeSample(opts_, epoch_, it);
  c.cpu_ns += clock_->ThreadCpuNanos() - c0;
  c.busy_ns += clock_->NowNanos() - t1;
  board_->End(worker);
  c.items++;
  c.bytes += static_cast<uint64_t>(it->image.width) * it->image.height * 3;
  if (!st.ok()) {
    FinishItem(it, st);
    return false;
  }
  return true;
}

void PipelineImpl::DoAugment(Item* it, int worker, ResizeScratch* scratch) {
  StageCounters& c = sc_[kAugment];
  int64_t t1 = clock_->NowNanos();
  board_->Begin(worker, kAugment, it->index, t1);
  int64_t c0 = clock_->ThreadCpuNanos();
  // The slot was reserved at admission: no lookup, no lock.
  BatchState& bs = *it->bs;
  std::vector<uint8_t>* raw_dst = opts_.mode == DecodeMode::kRaw ? &bs.raw_slots[it->slot] : nullptr;
  void* dst = raw_dst ? nullptr : static_cast<uint8_t*>(bs.batch->images) + it->slot * image_bytes_;
  size_t bytes = 0;
  Status st = AugmentSample(opts_, it, dst, raw_dst, scratch, &bytes);
  c.cpu_ns += clock_->ThreadCpuNanos() - c0;
  c.busy_ns += clock_->NowNanos() - t1;
  board_->End(worker);
  c.items++;
  c.bytes += bytes;
  FinishItem(it, st);
}

void PipelineImpl::DecodeLoop(int id) {
  StageCounters& c = sc_[kDecode];
  ResizeScratch scratch;
  const int worker = max_threads_[kRead] + id;
  for (;;) {
    if (!WaitActive(kDecode, id)) break;
    int64_t t0 = clock_->NowNanos();
    c.fill_samples++;
    c.fill_sum_permille += q_decode_->size() * 1000 / std::max<size_t>(1, q_decode_->capacity());
    auto got = q_decode_->Pop();
    c.wait_in_ns += clock_->NowNanos() - t0;
    if (!got) break;
    ItemPtr it = std::move(*got);
    // Augment on the same thread, while the decoded image is in this core's cache.
    if (DoDecode(it.get(), worker)) DoAugment(it.get(), worker, &scratch);
    PutItem(std::move(it));
  }
}

void PipelineImpl::FinishItem(Item* it, const Status& st) {
  Status err;
  if (!st.ok()) {
    std::string where = it->sample.location.empty() ? ds_->Location(it->index) : it->sample.location;
    std::string key = it->sample.key.empty() ? ds_->Key(it->index) : it->sample.key;
    err = Status(st.code(), fmt::format("sample '{}' ({}): {}", key, where, st.message()));
    if (opts_.on_error == ErrorPolicy::kSkip) {
      MutexLock l(&stats_mu_);
      skipped_count_++;
      if (skipped_.size() < 10000) skipped_.push_back(err.message());
    }
  }
  asm_->Finish(it, err);
}

Result<BatchPtr> PipelineImpl::Next() {
  if (!started_) return InvalidArgument("call StartEpoch before Next");
  int64_t enter = clock_->NowNanos();
  if (last_next_return_ns_ > 0) consumer_busy_ns_ += enter - last_next_return_ns_;
  const int64_t timeout_ns = static_cast<int64_t>(opts_.stall_timeout_s * 1e9);
  // With the watchdog on, the wait wakes up every so often (real time) to look at the
  // clock; a FakeClock advanced past the timeout is noticed at the next look.
  const int64_t slice_ns = timeout_ns > 0 ? std::clamp<int64_t>(timeout_ns / 4, 1'000'000, 100'000'000) : 0;
  BatchState bs;
  Status fatal;
  bool first = true, warned = false;
  for (;;) {
    bool starved = false;
    BatchAssembler::Take t = asm_->TakeNext(&bs, &fatal, &starved, slice_ns);
    if (t == BatchAssembler::Take::kEnd) return EndOfStream();
    if (first) {
      consumer_calls_++;
      if (starved) consumer_starved_++;
      first = false;
    }
    if (t == BatchAssembler::Take::kFatal) return fatal;
    if (t == BatchAssembler::Take::kStopped) return Cancelled("pipeline stopped");
    if (t == BatchAssembler::Take::kReady) break;
    // Timed out: a stall when no batch became ready since the pass started or the consumer
    // last took one (which opened the window for another).
    int64_t now = clock_->NowNanos();
    int64_t waited = now - std::max(last_next_return_ns_, asm_->last_ready_ns());
    if (waited < timeout_ns) continue;
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
  int64_t now = clock_->NowNanos();
  consumer_wait_ns_ += now - enter;
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
  const int readers = max_threads_[kRead];
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
  // The tuner sees two thread groups: read (waits on storage) and compute (decode and
  // augment, which run on the same threads).
  struct Totals {
    int64_t cpu = 0, wall = 0;
    uint64_t items = 0;
  };
  auto totals = [this](int g) {
    Totals t;
    if (g == 0) {
      t = {sc_[kRead].cpu_ns, sc_[kRead].busy_ns, sc_[kRead].items};
    } else {
      t = {sc_[kDecode].cpu_ns + sc_[kAugment].cpu_ns, sc_[kDecode].busy_ns + sc_[kAugment].busy_ns,
           sc_[kDecode].items};
    }
    return t;
  };
  int64_t last_ns = clock_->NowNanos();
  Totals last[2] = {totals(0), totals(1)};
  uint64_t last_calls = consumer_calls_, last_starved = consumer_starved_;
  int64_t last_busy = consumer_busy_ns_;
  for (;;) {
    {
      // Sleeps (real time) for what is left of the period on the clock; a FakeClock that
      // has not moved is looked at again a period later, so tests decide when steps run.
      int64_t left = period_ns - (clock_->NowNanos() - last_ns);
      MutexLock l(&tuner_mu_);
      if (!stop_ && left > 0) tuner_cv_.WaitForNanos(&tuner_mu_, std::clamp<int64_t>(left, 1'000'000, period_ns));
      if (stop_) return;
    }
    int64_t now = clock_->NowNanos();
    if (now - last_ns < period_ns) continue;
    AutotuneSnapshot snap;
    snap.period_s = (now - last_ns) * 1e-9;
    last_ns = now;
    std::string budget_change;
    if (node_budget_->Refresh(now, &budget_change)) {
      cpu_budget_ = node_budget_->budgets().cpus;
      MutexLock l(&stats_mu_);
      budget_why_ = node_budget_->budgets().why;
      tuning_.push_back({(now - t_start_ns_) * 1e-9, budget_change});
    }
    snap.cpu_budget = cpu_budget_;
    snap.batch_size = opts_.batch_size;
    for (int g = 0; g < 2; ++g) {
      Totals t = totals(g);
      StageObservation o;
      o.name = g == 0 ? "read" : "compute";
      o.io_stage = g == 0;
      o.items = t.items - last[g].items;
      o.cpu_s = (t.cpu - last[g].cpu) * 1e-9;
      o.wall_s = (t.wall - last[g].wall) * 1e-9;
      last[g] = t;
      snap.stages.push_back(o);
    }
    uint64_t calls = consumer_calls_, starved = consumer_starved_;
    int64_t busy = consumer_busy_ns_;
    snap.consumer_calls = calls - last_calls;
    snap.consumer_starved_calls = starved - last_starved;
    snap.consumer_busy_s = (busy - last_busy) * 1e-9;
    last_calls = calls;
    last_starved = starved;
    last_busy = busy;
    std::vector<std::string> reasons;
    if (tuner_->Step(snap, &reasons)) {
      if (opts_.threads == 0 && !fused_) {
        ApplyThreads(kRead, tuner_->threads(0));
        ApplyThreads(kDecode, tuner_->threads(1));
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
  // Stages that run on the same threads share those threads' time: read, decode and
  // augment in fused mode; decode and augment otherwise. Fractions are of the group's
  // thread time (busy + waiting); the bottleneck is the busiest member of the busiest group.
  const int group_of[3] = {0, fused_ ? 0 : 1, fused_ ? 0 : 1};
  double g_busy[2] = {0, 0}, g_win[2] = {0, 0}, g_wout[2] = {0, 0};
  for (int s = 0; s < 3; ++s) {
    int g = group_of[s];
    g_busy[g] += sc_[s].busy_ns * 1e-9;
    g_win[g] += sc_[s].wait_in_ns * 1e-9;
    g_wout[g] += sc_[s].wait_out_ns * 1e-9;
  }
  double best_util = -1, best_busy = -1;
  int best_group = 0;
  for (int g = 0; g < 2; ++g) {
    double total = g_busy[g] + g_win[g] + g_wout[g];
    double util = total > 0 ? g_busy[g] / total : 0;
    if (total > 0 && util > best_util) {
      best_util = util;
      best_group = g;
    }
  }
  for (int s = 0; s < kNumStages; ++s) {
    StageStats ss;
    ss.name = kStageNames[s];
    ss.items = sc_[s].items;
    ss.bytes = sc_[s].bytes;
    ss.busy_s = sc_[s].busy_ns * 1e-9;
    ss.cpu_s = sc_[s].cpu_ns * 1e-9;
    ss.wait_input_s = sc_[s].wait_in_ns * 1e-9;
    ss.wait_output_s = sc_[s].wait_out_ns * 1e-9;
    uint64_t fs = sc_[s].fill_samples;
    ss.queue_fill = fs ? sc_[s].fill_sum_permille / 1000.0 / fs : 0;
    if (s == kBatchStage) {
      if (st.wall_s > 0) ss.busy_frac = ss.busy_s / st.wall_s;
    } else {
      int g = group_of[s];
      ss.threads = target_atomic_[g == 0 ? kRead : kDecode].load();
      double total = g_busy[g] + g_win[g] + g_wout[g];
      if (total > 0) {
        ss.busy_frac = ss.busy_s / total;
        ss.wait_input_frac = g_win[g] / total;
        ss.wait_output_frac = g_wout[g] / total;
      }
      if (g == best_group && ss.busy_s > best_busy) {
        best_busy = ss.busy_s;
        st.bottleneck = ss.name;
      }
    }
    st.stages.push_back(ss);
  }
  st.threads = target_atomic_[kRead].load() + (fused_ ? 0 : target_atomic_[kDecode].load());
  st.consumer_wait_s = consumer_wait_ns_ * 1e-9;
  double consumer_total = (consumer_wait_ns_ + consumer_busy_ns_) * 1e-9;
  st.consumer_wait_frac = consumer_total > 0 ? st.consumer_wait_s / consumer_total : 0;
  // When the consumer hardly waits and the stages mostly wait on their output, the
  // consumer (the training step) is what bounds the pipeline.
  if (consumer_total > 0 && st.consumer_wait_frac < 0.05 && best_util < 0.6)
    st.bottleneck = "consumer";
  st.prefetch = asm_->prefetch();
  st.memory_budget = memory_budget_;
  st.cpu_budget = cpu_budget_;
  st.buffer_bytes = pool_ ? pool_->allocated_bytes() : 0;
  st.autotune = autotune_;
  st.rank = rank_;
  if (cache_) st.cache = CacheStatsOf(*cache_);
  MutexLock l(&stats_mu_);
  st.skipped = skipped_count_;
  st.budget_source = budget_why_;
  st.skipped_items = skipped_;
  st.tuning = tuning_;
  st.warnings = warnings_;
  return st;
}

}  // namespace

Result<std::unique_ptr<Pipeline>> Pipeline::Create(const PipelineOptions& opts) {
  auto p = std::make_unique<PipelineImpl>(opts);
  STOKER_RETURN_IF_ERROR(p->Init());
  return std::unique_ptr<Pipeline>(std::move(p));
}

}  // namespace stoker
