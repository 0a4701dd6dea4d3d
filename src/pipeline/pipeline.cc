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
// Admission hands out epoch positions in order, but only for batches inside the window
// [consumer_batch, consumer_batch + prefetch + 1): that bounds batch memory. Q is bounded,
// which bounds sample memory; augment never blocks on output (its slot is reserved), so
// the graph cannot deadlock. Items, samples and decoded images are recycled through free
// lists, batch buffers through a pool, so steady state touches no fresh pages.
#include "pipeline/pipeline.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "codec/image.h"
#include "core/queue.h"
#include "core/random.h"
#include "core/thread_pool.h"
#include "pipeline/autotune.h"
#include "pipeline/node_share.h"
#include "pipeline/options_schema.h"
#include "pipeline/plan.h"

namespace stoker {
namespace {

enum StageId : int { kRead = 0, kDecode = 1, kAugment = 2, kBatchStage = 3, kNumStages = 4 };
const char* const kStageNames[kNumStages] = {"read", "decode", "augment", "batch"};

int64_t ThreadCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

struct StageCounters {
  std::atomic<uint64_t> items{0}, bytes{0};
  std::atomic<int64_t> busy_ns{0}, cpu_ns{0}, wait_in_ns{0}, wait_out_ns{0};
  std::atomic<uint64_t> fill_samples{0}, fill_sum_permille{0};
};

struct Item {
  uint64_t pos = 0;    // position in this rank's epoch order
  uint64_t index = 0;  // dataset index
  Sample sample;
  DecodedImage image;
  double src_x = 0, src_y = 0, src_w = 0, src_h = 0;  // crop in decoded-image coordinates
  bool flip = false;
  int64_t label = -1;
};
using ItemPtr = std::unique_ptr<Item>;

int64_t ParseLabel(const Sample& s) {
  if (s.label >= 0) return s.label;
  const Field* f = s.Find("cls");
  if (!f) return -1;
  const char* b = reinterpret_cast<const char*>(f->data.data());
  const char* e = b + f->data.size();
  while (b < e && (*b == ' ' || *b == '\n' || *b == '\r' || *b == '\t')) ++b;
  while (e > b && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\r' || e[-1] == '\t')) --e;
  int64_t v = -1;
  auto r = std::from_chars(b, e, v);
  if (r.ec != std::errc() || r.ptr != e) return -1;
  return v;
}

struct BatchState {
  BatchPtr batch;
  int expected = 0;  // samples in this batch (before skips)
  int remaining = 0;
  std::vector<uint8_t> ok;  // per slot: 1 delivered, 0 skipped/failed
  std::vector<std::vector<uint8_t>> raw_slots;
  bool ready = false;
  Status error;  // first failing sample (by position) under kFail
  uint64_t error_pos = UINT64_MAX;
};

class PipelineImpl;

// Recycles Batch objects and their image buffers. Shared with the BatchPtr deleters so a
// batch may outlive the pipeline.
class BatchPool : public std::enable_shared_from_this<BatchPool> {
 public:
  BatchPool(HostAllocator* alloc, size_t bytes) : alloc_(alloc), bytes_(bytes) {}
  BatchPtr Get() {
    std::unique_ptr<Entry> e;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!free_.empty()) {
        e = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!e) {
      e = std::make_unique<Entry>();
      if (bytes_ > 0) e->buf = HostBuffer(alloc_, bytes_);
      allocated_bytes_ += static_cast<int64_t>(bytes_);
    }
    Entry* raw = e.release();
    raw->batch.images = raw->buf.data();
    std::weak_ptr<BatchPool> weak = shared_from_this();
    return BatchPtr(&raw->batch, [weak, raw](Batch*) {
      if (auto pool = weak.lock()) {
        pool->Put(std::unique_ptr<Entry>(raw));
      } else {
        delete raw;
      }
    });
  }
  int64_t allocated_bytes() const { return allocated_bytes_.load(); }
  bool alloc_failed(const BatchPtr& b) const { return bytes_ > 0 && b->images == nullptr; }

 private:
  struct Entry {
    Batch batch;
    HostBuffer buf;
  };
  void Put(std::unique_ptr<Entry> e) {
    std::lock_guard<std::mutex> lk(mu_);
    free_.push_back(std::move(e));
  }
  HostAllocator* alloc_;
  size_t bytes_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> free_;
  std::atomic<int64_t> allocated_bytes_{0};
};

class PipelineImpl final : public Pipeline {
 public:
  explicit PipelineImpl(const PipelineOptions& o) : opts_(o) {}
  ~PipelineImpl() override { Stop(); }

  Status Init();
  Status StartEpoch(int epoch, uint64_t start_batch) override;
  Result<BatchPtr> Next() override;
  void Stop() override;
  uint64_t batches_per_epoch() const override { return num_batches_; }
  uint64_t samples_per_epoch() const override { return per_rank_; }
  const Dataset& dataset() const override { return *ds_; }
  PipelineStats Stats() const override;
  const PipelineOptions& options() const override { return opts_; }
  Result<std::vector<uint64_t>> EpochOrder(int epoch) const override {
    return PlanEpoch(ds_->shards(), ds_->size(), epoch, plan_);
  }

 private:
  void StopWorkers();
  void SpawnWorkers();
  void ReadLoop(int id);
  void DecodeLoop(int id);
  bool DoDecode(Item* it);
  void DoAugment(Item* it, ResizeScratch* scratch);
  void TunerLoop();
  bool Active(int stage, int id);
  bool WaitActive(int stage, int id);  // false when stopping
  void ApplyThreads(int stage, int n);

  Status DecodeItem(Item* it);
  void FinishItem(Item* it, const Status& st);  // any stage; st non-OK = skip or fail
  void FinalizeBatch(uint64_t b, BatchState& bs);
  BatchState& GetBatchLocked(uint64_t b);

  ItemPtr GetItem() {
    std::lock_guard<std::mutex> lk(item_mu_);
    if (free_items_.empty()) return std::make_unique<Item>();
    ItemPtr it = std::move(free_items_.back());
    free_items_.pop_back();
    return it;
  }
  void PutItem(ItemPtr it) {
    std::lock_guard<std::mutex> lk(item_mu_);
    free_items_.push_back(std::move(it));
  }
  uint64_t BatchOf(uint64_t pos) const { return pos / static_cast<uint64_t>(opts_.batch_size); }
  int BatchLen(uint64_t b) const {
    uint64_t begin = b * opts_.batch_size;
    return static_cast<int>(std::min<uint64_t>(opts_.batch_size, per_rank_ - begin));
  }

  PipelineOptions opts_;
  Clock* clock_ = nullptr;
  std::unique_ptr<Dataset> ds_;
  EpochPlanOptions plan_;
  RankInfo rank_;
  uint64_t per_rank_ = 0, num_batches_ = 0;
  std::atomic<int> cpu_budget_{1};  // the tuner thread may change it (NodeBudget::Refresh)
  std::unique_ptr<NodeBudget> node_budget_;  // used by Init, then by the tuner thread only
  std::string budget_why_;                   // guarded by stats_mu_
  int64_t memory_budget_ = 0;
  size_t image_bytes_ = 0;
  std::shared_ptr<BatchPool> pool_;
  std::unique_ptr<Autotuner> tuner_;
  bool autotune_ = false;
  bool fused_ = false;  // each read thread also decodes and augments its sample
  bool auto_threads_ = false;  // threads=auto without `fused`: the topology may change per epoch
  // Counters at the start of the current epoch (read wall, compute CPU, items), for the
  // per-epoch topology choice.
  int64_t mark_read_ns_ = 0, mark_compute_cpu_ns_ = 0;
  uint64_t mark_read_items_ = 0, mark_compute_items_ = 0;
  void ChooseTopology();

  // Epoch state.
  int epoch_ = -1;
  std::vector<uint64_t> order_;
  uint64_t end_pos_ = 0;
  std::atomic<bool> stop_{false};
  bool started_ = false;

  // Admission (read stage input) and batches.
  std::mutex mu_;
  std::condition_variable admit_cv_, ready_cv_;
  uint64_t next_pos_ = 0;          // guarded by mu_
  uint64_t consumer_batch_ = 0;    // guarded by mu_
  std::atomic<int> prefetch_{2};
  std::map<uint64_t, BatchState> batches_;  // guarded by mu_
  Status fatal_;                   // guarded by mu_

  std::unique_ptr<BoundedQueue<ItemPtr>> q_decode_;
  std::mutex item_mu_;
  std::vector<ItemPtr> free_items_;

  // Workers.
  std::mutex thr_mu_;
  std::condition_variable thr_cv_;
  int target_[kNumStages] = {1, 1, 1, 1};  // guarded by thr_mu_
  std::atomic<int> target_atomic_[kNumStages];
  int max_threads_[kNumStages] = {1, 1, 1, 1};
  std::vector<std::thread> workers_;
  std::thread tuner_thread_;
  std::mutex tuner_mu_;
  std::condition_variable tuner_cv_;

  // Metrics.
  StageCounters sc_[kNumStages];
  std::atomic<uint64_t> samples_out_{0}, batches_out_{0};
  std::atomic<int64_t> consumer_wait_ns_{0}, consumer_busy_ns_{0};
  std::atomic<uint64_t> consumer_calls_{0}, consumer_starved_{0};
  int64_t t_start_ns_ = 0;
  int64_t last_next_return_ns_ = 0;
  mutable std::mutex stats_mu_;
  std::vector<std::string> skipped_;  // guarded by stats_mu_
  uint64_t skipped_count_ = 0;        // guarded by stats_mu_
  std::vector<TuningEvent> tuning_;   // guarded by stats_mu_
};

Status PipelineImpl::Init() {
  clock_ = opts_.clock ? opts_.clock : Clock::Real();
  // Ranges and choices from the options table, with messages naming the option.
  STOKER_RETURN_IF_ERROR(ValidatePipelineOptions(opts_));
  STOKER_ASSIGN_OR_RETURN(rank_, ResolveRank(opts_.rank, opts_.world_size));
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

  opts_.output.width = opts_.output.height = opts_.image_size;
  image_bytes_ = opts_.mode == DecodeMode::kRaw ? 0 : opts_.output.bytes();
  size_t batch_bytes = image_bytes_ * opts_.batch_size;

  // Budgets: explicit options, else this rank's share of the node (node_share.h).
  STOKER_ASSIGN_OR_RETURN(
      node_budget_, NodeBudget::Create(opts_, rank_, int64_t(4) * batch_bytes + (256 << 20)));
  cpu_budget_ = node_budget_->budgets().cpus;
  memory_budget_ = node_budget_->budgets().memory;
  budget_why_ = node_budget_->budgets().why;
  if (node_budget_->budgets().shared) tuning_.push_back({0.0, budget_why_});
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
  prefetch_ = pf.value;
  const int stage_of[2] = {kRead, kDecode};
  for (int g = 0; g < 2; ++g) {
    int s = stage_of[g];
    max_threads_[s] = th[g].max;
    target_[s] = th[g].value;
    target_atomic_[s] = th[g].value;
  }
  max_threads_[kAugment] = max_threads_[kBatchStage] = 0;
  target_[kAugment] = 0;
  target_atomic_[kAugment] = 0;
  tuner_ = std::make_unique<Autotuner>(th, pf);

  pool_ = std::make_shared<BatchPool>(
      opts_.allocator ? opts_.allocator : HostAllocator::Default(), batch_bytes);
  return Status::OK();
}

BatchState& PipelineImpl::GetBatchLocked(uint64_t b) {
  auto it = batches_.find(b);
  if (it != batches_.end()) return it->second;
  BatchState& bs = batches_[b];
  bs.expected = bs.remaining = BatchLen(b);
  bs.ok.assign(bs.expected, 0);
  bs.batch = pool_->Get();
  Batch& bt = *bs.batch;
  bt.epoch = epoch_;
  bt.index = b;
  bt.size = bs.expected;
  bt.height = bt.width = opts_.image_size;
  bt.layout = opts_.output.layout;
  bt.image_bytes = image_bytes_;
  bt.labels.assign(bs.expected, -1);
  bt.keys.resize(bs.expected);
  bt.sample_indices.assign(bs.expected, 0);
  bt.raw.clear();
  bt.raw_offsets.clear();
  if (opts_.mode == DecodeMode::kRaw) bs.raw_slots.resize(bs.expected);
  return bs;
}

Status PipelineImpl::StartEpoch(int epoch, uint64_t start_batch) {
  StopWorkers();
  if (epoch < 0) return InvalidArgument("epoch must be >= 0");
  if (start_batch > num_batches_)
    return InvalidArgument("start batch {} is past the epoch's {} batches", start_batch,
                           num_batches_);
  STOKER_ASSIGN_OR_RETURN(order_, PlanEpoch(ds_->shards(), ds_->size(), epoch, plan_));
  order_.resize(per_rank_);
  epoch_ = epoch;
  end_pos_ = per_rank_;
  {
    std::lock_guard<std::mutex> lk(mu_);
    next_pos_ = start_batch * opts_.batch_size;
    consumer_batch_ = start_batch;
    batches_.clear();
    fatal_ = Status::OK();
  }
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

// threads=auto: the first epoch runs read threads in front of compute threads. At each
// later epoch start, if reading a sample took less than a tenth of its compute (page cache,
// fast local NVMe), the epoch runs fused workers instead, one per compute thread: no
// hand-off at all (5-7% more samples/s on 2 cores in our measurement). If reads get slow
// again, the next epoch goes back to read threads, which wait on storage without a core.
void PipelineImpl::ChooseTopology() {
  int64_t read_ns = sc_[kRead].busy_ns;
  int64_t cpu_ns = sc_[kDecode].cpu_ns + sc_[kAugment].cpu_ns;
  uint64_t read_items = sc_[kRead].items, items = sc_[kDecode].items;
  uint64_t dr = read_items - mark_read_items_, dc = items - mark_compute_items_;
  double read_per = dr ? (read_ns - mark_read_ns_) * 1e-9 / dr : 0;
  double cpu_per = dc ? (cpu_ns - mark_compute_cpu_ns_) * 1e-9 / dc : 0;
  mark_read_ns_ = read_ns;
  mark_compute_cpu_ns_ = cpu_ns;
  mark_read_items_ = read_items;
  mark_compute_items_ = items;
  if (dr < 16 || dc < 16 || cpu_per <= 0) return;  // too little seen: keep the topology
  bool fast_reads = read_per < 0.1 * cpu_per;
  if (fast_reads == fused_) return;
  int compute = std::max(1, fused_ ? target_[kRead] : target_[kDecode]);
  fused_ = fast_reads;
  {
    std::lock_guard<std::mutex> lk(thr_mu_);
    target_[kRead] = fused_ ? compute : std::max(1, tuner_->threads(0));
    target_atomic_[kRead] = target_[kRead];
    target_[kDecode] = compute;
    target_atomic_[kDecode] = compute;
  }
  std::lock_guard<std::mutex> lk(stats_mu_);
  if (tuning_.size() < 1000)
    tuning_.push_back({(clock_->NowNanos() - t_start_ns_) * 1e-9,
                       fmt::format("epoch {}: a read took {:.3f} ms, {:.0f}% of a sample's compute: "
                                   "{}",
                                   epoch_, read_per * 1e3, 100 * read_per / cpu_per,
                                   fused_ ? fmt::format("{} fused workers", compute)
                                          : "read threads in front of compute threads again")});
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
  {
    std::lock_guard<std::mutex> lk(mu_);
    admit_cv_.notify_all();
    ready_cv_.notify_all();
  }
  {
    std::lock_guard<std::mutex> lk(thr_mu_);
    thr_cv_.notify_all();
  }
  {
    std::lock_guard<std::mutex> lk(tuner_mu_);
    tuner_cv_.notify_all();
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
  std::lock_guard<std::mutex> lk(mu_);
  batches_.clear();
}

bool PipelineImpl::Active(int stage, int id) {
  return id < target_atomic_[stage].load(std::memory_order_relaxed);
}

bool PipelineImpl::WaitActive(int stage, int id) {
  if (Active(stage, id)) return !stop_;
  std::unique_lock<std::mutex> lk(thr_mu_);
  thr_cv_.wait(lk, [&] { return stop_.load() || id < target_[stage]; });
  return !stop_;
}

void PipelineImpl::ApplyThreads(int stage, int n) {
  n = std::clamp(n, 1, max_threads_[stage]);
  std::lock_guard<std::mutex> lk(thr_mu_);
  target_[stage] = n;
  target_atomic_[stage] = n;
  thr_cv_.notify_all();
}

void PipelineImpl::ReadLoop(int id) {
  StageCounters& c = sc_[kRead];
  ResizeScratch scratch;  // fused mode
  for (;;) {
    if (!WaitActive(kRead, id)) break;
    uint64_t pos;
    {
      int64_t t0 = clock_->NowNanos();
      std::unique_lock<std::mutex> lk(mu_);
      admit_cv_.wait(lk, [&] {
        return stop_.load() || next_pos_ >= end_pos_ || !Active(kRead, id) ||
               BatchOf(next_pos_) < consumer_batch_ + static_cast<uint64_t>(prefetch_.load()) + 1;
      });
      c.wait_out_ns += clock_->NowNanos() - t0;
      if (stop_) break;
      if (!Active(kRead, id)) continue;
      if (next_pos_ >= end_pos_) break;
      pos = next_pos_++;
      GetBatchLocked(BatchOf(pos));  // reserve the batch slot
    }
    ItemPtr it = GetItem();
    it->pos = pos;
    it->index = order_[pos];
    int64_t t0 = clock_->NowNanos(), c0 = ThreadCpuNanos();
    Status st = ds_->Read(it->index, &it->sample);
    c.cpu_ns += ThreadCpuNanos() - c0;
    c.busy_ns += clock_->NowNanos() - t0;
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
      if (DoDecode(it.get())) DoAugment(it.get(), &scratch);
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

Status PipelineImpl::DecodeItem(Item* it) {
  const Sample& s = it->sample;
  it->label = ParseLabel(s);
  if (opts_.mode == DecodeMode::kRaw) return Status::OK();
  const Field* f = s.FindAny({"jpg", "jpeg", "png"});
  if (!f) {
    std::string have;
    for (size_t i = 0; i < s.num_fields; ++i) have += (i ? ", " : "") + s.fields[i].name;
    return Corrupt("no image field (jpg, jpeg, png); the sample has: {}",
                   have.empty() ? "no fields" : have);
  }
  if (f->data.empty()) return Corrupt("empty image field '{}'", f->name);
  STOKER_ASSIGN_OR_RETURN(ImageInfo info, ReadImageInfo(f->data.data(), f->data.size()));
  if (info.width < 1 || info.height < 1) return Corrupt("image has no pixels");
  DecodeRequest req;
  req.allow_dct_scale = opts_.dct_scale;
  req.allow_region_decode = opts_.region_decode;
  req.target_w = req.target_h = opts_.image_size;
  if (opts_.mode == DecodeMode::kTrain) {
    Rng crop_rng(opts_.seed, static_cast<uint64_t>(epoch_), it->index, kStreamCrop);
    req.crop = RandomResizedCropRect(info.width, info.height, opts_.rrc, crop_rng);
    Rng flip_rng(opts_.seed, static_cast<uint64_t>(epoch_), it->index, kStreamFlip);
    it->flip = flip_rng.Uniform() < opts_.flip_prob;
  } else {
    CenterCropPlan plan =
        CenterCropRectFor(info.width, info.height, opts_.val_resize, opts_.image_size);
    req.crop = plan.source_rect;
    it->flip = false;
  }
  STOKER_RETURN_IF_ERROR(DecodeImage(f->data.data(), f->data.size(), req, &it->image));
  const DecodedImage& img = it->image;
  DecodedRect r = SourceToDecoded(img, req.crop.x, req.crop.y, req.crop.w, req.crop.h);
  it->src_x = std::max(0.0, r.x);
  it->src_y = std::max(0.0, r.y);
  // Clamp into the decoded pixels (rounding at the image's right/bottom edge).
  it->src_w = std::min(r.w, img.width - it->src_x);
  it->src_h = std::min(r.h, img.height - it->src_y);
  if (it->src_w <= 0 || it->src_h <= 0) return Internal("decoded region does not cover the crop");
  return Status::OK();
}

// Runs the decode stage on one item with its metrics; false if the item was finished
// (failed) here.
bool PipelineImpl::DoDecode(Item* it) {
  StageCounters& c = sc_[kDecode];
  int64_t t1 = clock_->NowNanos(), c0 = ThreadCpuNanos();
  Status st = DecodeItem(it);
  c.cpu_ns += ThreadCpuNanos() - c0;
  c.busy_ns += clock_->NowNanos() - t1;
  c.items++;
  c.bytes += static_cast<uint64_t>(it->image.width) * it->image.height * 3;
  if (!st.ok()) {
    FinishItem(it, st);
    return false;
  }
  return true;
}

void PipelineImpl::DoAugment(Item* it, ResizeScratch* scratch) {
  StageCounters& c = sc_[kAugment];
  int64_t t1 = clock_->NowNanos(), c0 = ThreadCpuNanos();
  uint64_t b = BatchOf(it->pos);
  int slot = static_cast<int>(it->pos - b * opts_.batch_size);
  void* dst = nullptr;
  std::vector<uint8_t>* raw_dst = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    BatchState& bs = GetBatchLocked(b);
    if (opts_.mode == DecodeMode::kRaw) {
      raw_dst = &bs.raw_slots[slot];
    } else {
      dst = static_cast<uint8_t*>(bs.batch->images) + slot * image_bytes_;
    }
  }
  const Field* raw_field = nullptr;
  if (raw_dst) {
    raw_field = opts_.raw_field.empty()
                    ? (it->sample.num_fields ? &it->sample.fields[0] : nullptr)
                    : it->sample.Find(opts_.raw_field);
    raw_dst->clear();
    if (raw_field) raw_dst->insert(raw_dst->end(), raw_field->data.begin(), raw_field->data.end());
  } else if (dst) {
    ResizeFlipNormalize(it->image, it->src_x, it->src_y, it->src_w, it->src_h, it->flip,
                        opts_.output, dst, scratch);
  }
  c.cpu_ns += ThreadCpuNanos() - c0;
  c.busy_ns += clock_->NowNanos() - t1;
  c.items++;
  c.bytes += raw_dst ? raw_dst->size() : image_bytes_;
  if (raw_dst && !raw_field) {
    FinishItem(it, Corrupt("no field '{}' to carry", opts_.raw_field.empty() ? "(any)" : opts_.raw_field));
  } else {
    FinishItem(it, Status::OK());
  }
}

void PipelineImpl::DecodeLoop(int id) {
  StageCounters& c = sc_[kDecode];
  ResizeScratch scratch;
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
    if (DoDecode(it.get())) DoAugment(it.get(), &scratch);
    PutItem(std::move(it));
  }
}

void PipelineImpl::FinishItem(Item* it, const Status& st) {
  uint64_t b = BatchOf(it->pos);
  int slot = static_cast<int>(it->pos - b * opts_.batch_size);
  Status err;
  if (!st.ok()) {
    std::string where = it->sample.location.empty() ? ds_->Location(it->index) : it->sample.location;
    std::string key = it->sample.key.empty() ? ds_->Key(it->index) : it->sample.key;
    err = Status(st.code(), fmt::format("sample '{}' ({}): {}", key, where, st.message()));
    if (opts_.on_error == ErrorPolicy::kSkip) {
      std::lock_guard<std::mutex> lk(stats_mu_);
      skipped_count_++;
      if (skipped_.size() < 10000) skipped_.push_back(err.message());
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  BatchState& bs = GetBatchLocked(b);
  if (st.ok()) {
    bs.ok[slot] = 1;
    bs.batch->labels[slot] = it->label;
    bs.batch->keys[slot] = it->sample.key;
    bs.batch->sample_indices[slot] = it->index;
  } else if (opts_.on_error == ErrorPolicy::kFail && it->pos < bs.error_pos) {
    bs.error = err;
    bs.error_pos = it->pos;
  }
  if (--bs.remaining == 0) {
    FinalizeBatch(b, bs);
    bs.ready = true;
    ready_cv_.notify_all();
  }
}

// Called with mu_ held when the last sample of batch b is done: compacts skipped slots.
void PipelineImpl::FinalizeBatch(uint64_t b, BatchState& bs) {
  int64_t t0 = clock_->NowNanos();
  Batch& bt = *bs.batch;
  int w = 0;
  for (int r = 0; r < bs.expected; ++r) {
    if (!bs.ok[r]) continue;
    if (w != r) {
      if (image_bytes_ > 0)
        std::memmove(static_cast<uint8_t*>(bt.images) + w * image_bytes_,
                     static_cast<uint8_t*>(bt.images) + r * image_bytes_, image_bytes_);
      bt.labels[w] = bt.labels[r];
      bt.keys[w] = std::move(bt.keys[r]);
      bt.sample_indices[w] = bt.sample_indices[r];
      if (opts_.mode == DecodeMode::kRaw) std::swap(bs.raw_slots[w], bs.raw_slots[r]);
    }
    ++w;
  }
  bt.size = w;
  bt.labels.resize(w);
  bt.keys.resize(w);
  bt.sample_indices.resize(w);
  if (opts_.mode == DecodeMode::kRaw) {
    size_t total = 0;
    for (int i = 0; i < w; ++i) total += bs.raw_slots[i].size();
    bt.raw.resize(total);
    bt.raw_offsets.resize(w + 1);
    size_t off = 0;
    for (int i = 0; i < w; ++i) {
      bt.raw_offsets[i] = off;
      if (!bs.raw_slots[i].empty()) std::memcpy(bt.raw.data() + off, bs.raw_slots[i].data(), bs.raw_slots[i].size());
      off += bs.raw_slots[i].size();
    }
    bt.raw_offsets[w] = off;
  }
  StageCounters& c = sc_[kBatchStage];
  c.items++;
  c.busy_ns += clock_->NowNanos() - t0;
  c.bytes += static_cast<uint64_t>(w) * image_bytes_;
}

Result<BatchPtr> PipelineImpl::Next() {
  if (!started_) return InvalidArgument("call StartEpoch before Next");
  int64_t enter = clock_->NowNanos();
  if (last_next_return_ns_ > 0) consumer_busy_ns_ += enter - last_next_return_ns_;
  BatchState bs;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (consumer_batch_ >= num_batches_) return EndOfStream();
    uint64_t b = consumer_batch_;
    auto ready = [&] {
      if (stop_ || !fatal_.ok()) return true;
      auto it = batches_.find(b);
      return it != batches_.end() && it->second.ready;
    };
    consumer_calls_++;
    if (!ready()) consumer_starved_++;
    ready_cv_.wait(lk, ready);
    if (!fatal_.ok()) return fatal_;
    auto it = batches_.find(b);
    if (it == batches_.end() || !it->second.ready) return Cancelled("pipeline stopped");
    bs = std::move(it->second);
    batches_.erase(it);
    consumer_batch_++;
    admit_cv_.notify_all();
  }
  int64_t now = clock_->NowNanos();
  consumer_wait_ns_ += now - enter;
  last_next_return_ns_ = now;
  if (!bs.error.ok()) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      fatal_ = bs.error;
    }
    StopWorkers();
    return bs.error;
  }
  if (pool_->alloc_failed(bs.batch))
    return Status(StatusCode::kInternal, "out of memory allocating a batch buffer");
  samples_out_ += bs.batch->size;
  batches_out_++;
  return std::move(bs.batch);
}

void PipelineImpl::TunerLoop() {
  const int64_t period_ns = 100'000'000;  // 100 ms
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
      std::unique_lock<std::mutex> lk(tuner_mu_);
      tuner_cv_.wait_for(lk, std::chrono::nanoseconds(period_ns), [&] { return stop_.load(); });
      if (stop_) return;
    }
    int64_t now = clock_->NowNanos();
    AutotuneSnapshot snap;
    snap.period_s = (now - last_ns) * 1e-9;
    last_ns = now;
    std::string budget_change;
    if (node_budget_->Refresh(now, &budget_change)) {
      cpu_budget_ = node_budget_->budgets().cpus;
      std::lock_guard<std::mutex> lk(stats_mu_);
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
      if (opts_.prefetch == 0 && tuner_->prefetch() != prefetch_) {
        std::lock_guard<std::mutex> lk(mu_);
        prefetch_ = tuner_->prefetch();
        admit_cv_.notify_all();
      }
      std::lock_guard<std::mutex> lk(stats_mu_);
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
  st.prefetch = prefetch_;
  st.memory_budget = memory_budget_;
  st.cpu_budget = cpu_budget_;
  st.buffer_bytes = pool_ ? pool_->allocated_bytes() : 0;
  st.autotune = autotune_;
  st.rank = rank_;
  std::lock_guard<std::mutex> lk(stats_mu_);
  st.skipped = skipped_count_;
  st.budget_source = budget_why_;
  st.skipped_items = skipped_;
  st.tuning = tuning_;
  return st;
}

}  // namespace

Result<std::unique_ptr<Pipeline>> Pipeline::Create(const PipelineOptions& opts) {
  auto p = std::make_unique<PipelineImpl>(opts);
  STOKER_RETURN_IF_ERROR(p->Init());
  return std::unique_ptr<Pipeline>(std::move(p));
}

}  // namespace stoker
