#include "tokens/token_pipeline.h"

#include <cstdint>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <atomic>
#include <thread>
#include <utility>

#include "core/thread_pool.h"
#include "formats/checksum.h"

namespace stoker::tokens {

namespace {
double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Recycles batch buffers: a TokenBatchPtr's deleter gives its batch back, so the pool's
// size is bounded by the batches alive (prefetched + held by the consumer).
class BatchPool : public std::enable_shared_from_this<BatchPool> {
 public:
  std::shared_ptr<TokenBatch> Get() {
    std::unique_ptr<TokenBatch> b;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!free_.empty()) {
        b = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!b) b = std::make_unique<TokenBatch>();
    std::weak_ptr<BatchPool> self = weak_from_this();
    return std::shared_ptr<TokenBatch>(b.release(), [self](TokenBatch* p) {
      if (auto pool = self.lock()) {
        std::lock_guard<std::mutex> l(pool->mu_);
        if (pool->free_.size() < 16) {
          pool->free_.emplace_back(p);
          return;
        }
      }
      delete p;
    });
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<TokenBatch>> free_;
};
}  // namespace

// Batches are assembled `prefetch` ahead of the consumer by `threads` threads and delivered
// in step order. Plans are made on the consumer's thread (they advance the blend).
//
// The hand-off is a ring of `prefetch` slots addressed by a running number: the consumer
// publishes plans (tail_), the threads claim them in order (claim_), the consumer takes the
// batches in order (head_). Nobody sleeps while there is work: a thread that finds no plan
// spins for a while (kIdleSpin) before it sleeps, and Next(), when its batch is not ready
// (assemble_when_waiting): assembles a queued batch itself; then spins for about two
// batches' assembly time; then, if a thread still holds its batch (a thread preempted in
// the middle of it, on a busy machine, would hold it up for a time slice), assembles that
// batch itself from the same plan (a pure function of it), and the thread's copy is
// dropped when it ends. A futex wake happens only when one side really slept: with a wake
// per batch (the thread pool and futures before), the wakes took ~14 % of the time at
// ~30,000 batches/s (bench/RESULTS.md).
class TokenPipeline::Prefetcher {
 public:
  Prefetcher(const TokenPipeline* p, int threads, int depth, bool help)
      : p_(p), help_(help), batches_(std::make_shared<BatchPool>()) {
    for (int i = 0; i < std::max(1, depth); ++i) slots_.push_back(std::make_unique<Slot>());
    for (int i = 0; i < std::max(1, threads); ++i)
      threads_.emplace_back([this, i] {
        SetThreadName("stoker-tokens-" + std::to_string(i));
        Loop();
      });
  }
  ~Prefetcher() {
    Drain();
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_.store(true);
    }
    work_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // Consumer side (one thread). Plans are written into NextPlan(), then published, while
  // fewer than `prefetch` are queued.
  size_t size() const { return static_cast<size_t>(tail_.load(std::memory_order_relaxed) - head_); }
  // Whether another plan can be queued now: fewer than `prefetch` are, and the next slot is
  // not still read by a thread whose batch was taken over (at most one is waited for, when
  // nothing is queued).
  bool CanPublish() {
    if (size() >= slots_.size()) return false;
    Slot& s = slot(tail_.load(std::memory_order_relaxed));
    if (s.users.load(std::memory_order_seq_cst) == 0) return true;
    if (size() > 0) return false;
    WaitUntil([&] { return s.users.load(std::memory_order_seq_cst) == 0; });
    return true;
  }
  Plan* NextPlan() {
    Slot& s = slot(tail_.load(std::memory_order_relaxed));
    std::lock_guard<std::mutex> l(s.mu);
    s.taken = false;
    return &s.plan;
  }
  void Publish() {
    tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
    // Dekker with Loop(): it counts itself a sleeper, then looks at tail_ again.
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> l(mu_); }
      work_cv_.notify_one();
    }
  }
  Result<TokenBatchPtr> Pop() {
    const uint64_t i = head_;
    Slot& s = slot(i);
    Get(i);
    ++head_;
    if (!s.status.ok()) {
      s.batch.reset();
      return std::exchange(s.status, Status::OK());
    }
    return TokenBatchPtr(std::move(s.batch));
  }
  // Drops the queued plans and waits for the threads; nothing is in flight after it.
  void Drain() {
    const uint64_t t = tail_.load(std::memory_order_relaxed);
    uint64_t c = claim_.load();
    while (c < t && !claim_.compare_exchange_weak(c, t)) {
    }
    for (auto& s : slots_) {
      WaitUntil([&] { return s->users.load(std::memory_order_seq_cst) == 0; });
      s->batch.reset();
      s->status = Status::OK();
    }
    head_ = t;
  }

 private:
  struct Slot {
    Plan plan;
    Scratch scratch;
    std::shared_ptr<TokenBatch> batch;
    Status status;
    std::atomic<uint64_t> done{0};  // number + 1 of the batch a thread delivered here
    std::atomic<int> users{0};      // threads claiming or assembling this slot's plan
    std::mutex mu;                  // a thread's result against a take-over
    bool taken = false;             // guarded by mu: Next() assembled this batch itself
  };
  // How long an idle thread spins before it sleeps (the consumer publishes the next plan
  // within one of its own iterations when it runs flat out). 20 µs rather than 100: on a
  // busy machine a longer spin took CPU from the consumer (bench/RESULTS.md).
  static constexpr auto kIdleSpin = std::chrono::microseconds(20);
  // How long Next() leaves a queued batch to a spinning thread before it takes it itself.
  static constexpr auto kHelpAfter = std::chrono::microseconds(5);

  Slot& slot(uint64_t i) { return *slots_[i % slots_.size()]; }
  static void Relax() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  static auto Now() { return std::chrono::steady_clock::now(); }

  void Account(std::chrono::steady_clock::time_point t0) {
    const double dt = Since(t0);
    {
      std::lock_guard<std::mutex> l(p_->stats_mu_);
      p_->stats_.assemble_s += dt;
    }
    const int64_t ns = static_cast<int64_t>(dt * 1e9);
    const int64_t avg = avg_ns_.load(std::memory_order_relaxed);
    avg_ns_.store(avg == 0 ? ns : avg + (ns - avg) / 8, std::memory_order_relaxed);
  }

  // Assembles batch i, claimed by the caller (its slot's `users` counts it).
  void Run(uint64_t i) {
    Slot& s = slot(i);
    const auto t0 = Now();
    std::shared_ptr<TokenBatch> b = batches_->Get();
    Status st = p_->Assemble(s.plan, &s.scratch, b.get());
    Account(t0);
    {
      std::lock_guard<std::mutex> l(s.mu);
      if (!s.taken) {  // else Next() delivered its own copy: this one goes back to the pool
        s.batch = std::move(b);
        s.status = std::move(st);
        s.done.store(i + 1, std::memory_order_seq_cst);
      }
    }
    Release(s);
  }

  // Ends a use of slot s (and wakes the consumer if it sleeps on something).
  void Release(Slot& s) {
    s.users.fetch_sub(1, std::memory_order_seq_cst);
    // Dekker with WaitUntil(): it says it waits, then looks again.
    if (waiting_.load(std::memory_order_seq_cst)) {
      { std::lock_guard<std::mutex> l(mu_); }
      done_cv_.notify_all();
    }
  }

  // Claims the next published plan; false when there is none.
  bool ClaimNext(uint64_t* i) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    while (c < tail_.load(std::memory_order_acquire)) {
      // Counted a user before the claim, so that a take-over never republishes a slot
      // whose plan a thread is about to read.
      Slot& s = slot(c);
      s.users.fetch_add(1, std::memory_order_seq_cst);
      if (claim_.compare_exchange_strong(c, c + 1, std::memory_order_seq_cst)) {
        *i = c;
        return true;
      }
      Release(s);
    }
    return false;
  }

  void Loop() {
    auto idle_since = Now();
    bool idle = false;  // counted in idle_: spinning for work
    for (int spins = 0;; ++spins) {
      uint64_t i;
      if (ClaimNext(&i)) {
        if (idle) idle_.fetch_sub(1, std::memory_order_relaxed);
        idle = false;
        Run(i);
        spins = 0;
        continue;
      }
      if (!idle) {
        idle = true;
        idle_.fetch_add(1, std::memory_order_relaxed);
        idle_since = Now();
      }
      if (stop_.load(std::memory_order_acquire)) {
        idle_.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
      if (spins % 64 != 0 || Now() - idle_since < kIdleSpin) {
        Relax();
        continue;
      }
      idle_.fetch_sub(1, std::memory_order_relaxed);
      idle = false;
      std::unique_lock<std::mutex> l(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      work_cv_.wait(l, [&] {
        return stop_.load() || claim_.load() < tail_.load(std::memory_order_seq_cst);
      });
      sleepers_.fetch_sub(1);
    }
  }

  // Spins for about two batches' assembly time, then sleeps, until ready().
  template <typename Ready>
  void WaitUntil(const Ready& ready) {
    if (ready()) return;
    const auto limit = std::chrono::nanoseconds(
        std::min<int64_t>(2 * avg_ns_.load(std::memory_order_relaxed), 200'000));
    const auto t0 = Now();
    for (int spins = 1; !(spins % 64 == 0 && Now() - t0 > limit); ++spins) {
      if (ready()) return;
      Relax();
    }
    waiting_.store(true, std::memory_order_seq_cst);
    {
      std::unique_lock<std::mutex> l(mu_);
      done_cv_.wait(l, ready);
    }
    waiting_.store(false, std::memory_order_relaxed);
  }

  // Until batch i is in its slot (batch, status).
  void Get(uint64_t i) {
    Slot& s = slot(i);
    auto ready = [&] { return s.done.load(std::memory_order_seq_cst) == i + 1; };
    if (ready()) return;
    if (!help_) return WaitUntil(ready);
    // Queued batches that no spinning thread takes within kHelpAfter are assembled here
    // (batch i itself when nobody has started it).
    const auto limit = std::chrono::nanoseconds(
        std::min<int64_t>(2 * avg_ns_.load(std::memory_order_relaxed), 200'000));
    auto t0 = Now();
    for (int spins = 1;; ++spins) {
      if (ready()) return;
      uint64_t j;
      const bool late = spins % 16 == 0 && Now() - t0 > kHelpAfter;
      if ((idle_.load(std::memory_order_relaxed) == 0 || late) && ClaimNext(&j)) {
        Run(j);
        {
          std::lock_guard<std::mutex> l(p_->stats_mu_);
          ++p_->stats_.assembled_by_consumer;
        }
        t0 = Now();
        continue;
      }
      if (spins % 64 == 0 && Now() - t0 > limit + kHelpAfter) break;
      Relax();
    }
    // A thread holds batch i and has not finished it in twice the usual time: assemble it
    // here from the same plan (the thread only reads the plan; its copy is dropped).
    {
      std::lock_guard<std::mutex> l(s.mu);
      if (ready()) return;
      s.taken = true;
    }
    const auto t1 = Now();
    std::shared_ptr<TokenBatch> b = batches_->Get();
    s.status = p_->Assemble(s.plan, &own_scratch_, b.get());
    s.batch = std::move(b);
    Account(t1);
    std::lock_guard<std::mutex> l(p_->stats_mu_);
    ++p_->stats_.assembled_by_consumer;
    ++p_->stats_.taken_over;
  }

  const TokenPipeline* p_;
  const bool help_;
  std::shared_ptr<BatchPool> batches_;
  std::vector<std::unique_ptr<Slot>> slots_;
  Scratch own_scratch_;                 // the consumer's, for batches it takes over
  uint64_t head_ = 0;                   // consumer: the next batch to deliver
  std::atomic<uint64_t> tail_{0};       // plans published
  std::atomic<uint64_t> claim_{0};      // the next plan to claim
  std::atomic<int> sleepers_{0};        // threads asleep on work_cv_
  std::atomic<int> idle_{0};            // threads spinning for work
  std::atomic<bool> waiting_{false};    // the consumer asleep on done_cv_
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> avg_ns_{0};      // assembly time per batch (moving average)
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<std::thread> threads_;
};

TokenPipeline::TokenPipeline(TokenPipelineOptions o) : o_(std::move(o)) {}
TokenPipeline::~TokenPipeline() { prefetch_.reset(); }

Result<std::unique_ptr<TokenPipeline>> TokenPipeline::Create(const TokenPipelineOptions& o) {
  if (o.data.empty()) return InvalidArgument("no token data given");
  if (!o.weights.empty() && o.weights.size() != o.data.size())
    return InvalidArgument("{} blend weights for {} corpora", o.weights.size(), o.data.size());
  for (double w : o.weights)
    if (!(w >= 0)) return InvalidArgument("blend weight {} is negative", w);
  if (o.batch_size < 1) return InvalidArgument("batch size {} < 1", o.batch_size);
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    return InvalidArgument("rank {} is not in [0, world size {})", o.rank, o.world_size);
  if (o.prefetch < 1) return InvalidArgument("prefetch {} < 1", o.prefetch);
  std::unique_ptr<TokenPipeline> p(new TokenPipeline(o));
  STOKER_RETURN_IF_ERROR(p->Init());
  return p;
}

Status TokenPipeline::Init() {
  std::vector<double> w = o_.weights;
  if (w.empty()) w.assign(o_.data.size(), 1.0);
  std::string desc = fmt::format("v1|S={}|mode={}|seed={}|shuffle={}|drop={}|split={},{}|skip={}",
                                 o_.index.seq_len, PackModeName(o_.index.mode), o_.index.seed,
                                 o_.index.shuffle, o_.index.drop_last_partial,
                                 o_.index.split_begin, o_.index.split_end, o_.index.skip_empty);
  for (size_t d = 0; d < o_.data.size(); ++d) {
    Corpus c;
    STOKER_ASSIGN_OR_RETURN(c.store, OpenTokenStore(o_.data[d], o_.store));
    STOKER_ASSIGN_OR_RETURN(c.docs, SelectDocuments(*c.store, o_.index));
    stats_.skipped_empty += c.docs.skipped_empty;
    desc += fmt::format("|{}:{}:{}:{}:{}", o_.data[d], c.store->num_documents(),
                        c.store->num_tokens(), w[d], c.docs.size());
    corpora_.push_back(std::move(c));
  }
  config_hash_ = XXH64(desc.data(), desc.size());
  blend_ = std::make_unique<BlendCursor>(w);
  samples_per_epoch_ = 0;
  for (size_t d = 0; d < corpora_.size(); ++d) {
    STOKER_ASSIGN_OR_RETURN(auto ix, Index(d, 0));
    samples_per_epoch_ += ix->num_samples();
  }
  for (const auto& c : corpora_) stores_.push_back(c.store.get());
  prefetch_ = std::make_unique<Prefetcher>(this, o_.threads, o_.prefetch, o_.assemble_when_waiting);
  return Status::OK();
}

Result<std::shared_ptr<const EpochIndex>> TokenPipeline::Index(size_t d, uint64_t e) {
  Corpus& c = corpora_[d];
  if (c.epochs.size() > e && c.epochs[e]) return c.epochs[e];
  STOKER_ASSIGN_OR_RETURN(auto ix, EpochIndex::Get(*c.store, c.docs, o_.index, e, d, o_.store.env));
  {
    std::lock_guard<std::mutex> l(stats_mu_);
    stats_.index_build_s += ix->info().seconds;
    stats_.index_build_cpu_s += ix->info().cpu_seconds;
    stats_.index_bytes = std::max<uint64_t>(stats_.index_bytes, ix->info().bytes);
    ++(ix->info().from_cache ? stats_.indices_cached : stats_.indices_built);
  }
  if (c.epochs.size() <= e) c.epochs.resize(e + 1);
  c.epochs[e] = ix;
  // Keep the two most recent epochs in memory; older ones reload from the cache if needed.
  if (e >= 2 && c.epochs[e - 2]) c.epochs[e - 2].reset();
  if (c.epoch_start.empty()) c.epoch_start.push_back(0);
  if (c.epoch_start.size() == e + 1) c.epoch_start.push_back(c.epoch_start[e] + ix->num_samples());
  return ix;
}

Status TokenPipeline::Locate(size_t d, uint64_t j, Row* row) {
  Corpus& c = corpora_[d];
  if (c.epoch_start.empty()) STOKER_RETURN_IF_ERROR(Index(d, 0).status());
  while (j >= c.epoch_start.back())
    STOKER_RETURN_IF_ERROR(Index(d, c.epoch_start.size() - 1).status());
  auto it = std::upper_bound(c.epoch_start.begin(), c.epoch_start.end(), j);
  uint64_t e = static_cast<uint64_t>(it - c.epoch_start.begin()) - 1;
  STOKER_ASSIGN_OR_RETURN(row->index, Index(d, e));
  row->corpus = d;
  row->epoch = e;
  row->position = j - c.epoch_start[e];
  return Status::OK();
}

Status TokenPipeline::PlanStep(Plan* p) {
  const uint64_t B = static_cast<uint64_t>(o_.batch_size);
  const uint64_t GB = B * static_cast<uint64_t>(o_.world_size);
  p->rows.clear();
  p->first_sample = next_global_ + static_cast<uint64_t>(o_.rank) * B;
  p->step = next_global_ / GB;
  const uint64_t mine_begin = p->first_sample, mine_end = p->first_sample + B;
  for (uint64_t g = next_global_; g < next_global_ + GB; ++g) {
    auto [d, j] = blend_->Next();
    if (g < mine_begin || g >= mine_end) continue;
    Row r;
    r.global = g;
    STOKER_RETURN_IF_ERROR(Locate(d, j, &r));
    p->rows.push_back(std::move(r));
  }
  next_global_ += GB;
  return Status::OK();
}

namespace {

// (Re)allocates `buf` to exactly `bytes` (batches are recycled: the same size keeps the
// buffer, so a pinned allocator pins once per buffer).
Status Ensure(HostAllocator* a, HostBuffer* buf, size_t bytes, const char* what) {
  if (buf->size() == bytes && (bytes == 0 || buf->data() != nullptr)) return Status::OK();
  buf->reset();
  if (bytes == 0) return Status::OK();
  *buf = HostBuffer(a, bytes);
  if (!*buf)
    return Internal("token batch: could not allocate {} bytes for {} ({})", bytes, what, a->name());
  return Status::OK();
}

template <typename T>
Status Fill(const TokenPipelineOptions& o, const std::vector<const TokenStore*>& stores,
            const std::vector<std::pair<size_t, std::vector<Piece>>>& rows, PackMode mode,
            TokenBatch* b) {
  const int64_t S = o.index.seq_len;
  const size_t B = rows.size();
  HostAllocator* alloc = o.allocator ? o.allocator : HostAllocator::Default();
  const bool win = mode == PackMode::kConcat && o.window;
  const bool with_pos = o.position_ids == TokenPipelineOptions::PositionIds::kOn ||
                        (o.position_ids == TokenPipelineOptions::PositionIds::kAuto &&
                         mode != PackMode::kConcat);
  b->windowed = win;
  b->has_position_ids = with_pos;
  const size_t sz = sizeof(T);
  STOKER_RETURN_IF_ERROR(Ensure(alloc, &b->window, win ? B * (S + 1) * sz : 0, "window"));
  STOKER_RETURN_IF_ERROR(Ensure(alloc, &b->input_ids, win ? 0 : B * S * sz, "input_ids"));
  STOKER_RETURN_IF_ERROR(Ensure(alloc, &b->labels, win ? 0 : B * S * sz, "labels"));
  STOKER_RETURN_IF_ERROR(Ensure(alloc, &b->position_ids, with_pos ? B * S * sz : 0, "position_ids"));
  T* pos = static_cast<T*>(b->position_ids.data());
  b->cu_seqlens.assign(1, 0);
  b->pieces.clear();
  b->max_seqlen = 0;
  b->pad_tokens = b->tokens = 0;
  const T ignore = static_cast<T>(o.ignore_index);
  auto check = [&](const TokenStore& st, const Piece& pc, const TokenSpan& sp, uint64_t n) -> Status {
    if (o.vocab_size <= 0) return Status::OK();
    int64_t lo, hi;
    sp.MinMax(pc.offset, n, &lo, &hi);
    if (lo >= 0 && hi < o.vocab_size) return Status::OK();
    for (uint64_t i = 0; i < n; ++i) {
      int64_t v = sp.At(pc.offset + i);
      if (v < 0 || v >= o.vocab_size)
        return Corrupt("{}: token {} is id {}, outside the vocabulary [0, {})",
                       st.Location(pc.doc), pc.offset + i, v, o.vocab_size);
    }
    return Status::OK();
  };
  // The token bytes of the next row are prefetched while this one is copied: a row's
  // documents lie at random places of the mapping, and their misses would otherwise come
  // one after the other inside the copy.
  auto prefetch_row = [&](size_t r) {
    if (r >= B) return;
    const TokenStore& st = *stores[rows[r].first];
    for (const Piece& pc : rows[r].second) st.Document(pc.doc).Prefetch(pc.offset, pc.len);
  };
  prefetch_row(0);
  for (size_t r = 0; r < B; ++r) {
    prefetch_row(r + 1);
    const size_t d = rows[r].first;
    const TokenStore& st = *stores[d];
    const auto& pieces = rows[r].second;
    T* rpos = with_pos ? pos + r * S : nullptr;
    int64_t filled = 0;
    auto segment = [&](int64_t len) {
      b->cu_seqlens.push_back(b->cu_seqlens.back() + static_cast<int32_t>(len));
      b->max_seqlen = std::max<int32_t>(b->max_seqlen, static_cast<int32_t>(len));
    };
    auto positions = [&](int64_t at, int64_t n, int64_t first) {
      if (rpos == nullptr) return;
      for (int64_t i = 0; i < n; ++i)
        rpos[at + i] = static_cast<T>(o.reset_position_ids ? first + i : at + i);
    };
    if (mode == PackMode::kConcat && win) {
      // The window's S + 1 tokens are copied once; input_ids and labels are views of it.
      T* rw = static_cast<T*>(b->window.data()) + r * (S + 1);
      for (const Piece& pc : pieces) {
        TokenSpan sp = st.Document(pc.doc);
        int64_t n = std::min<int64_t>(static_cast<int64_t>(pc.len), S + 1 - filled);
        if (n <= 0) break;
        STOKER_RETURN_IF_ERROR(check(st, pc, sp, static_cast<uint64_t>(n)));
        sp.CopyTo(pc.offset, static_cast<uint64_t>(n), rw + filled);
        int64_t n_in = std::min<int64_t>(n, S - filled);
        if (n_in > 0) {
          positions(filled, n_in, 0);
          b->pieces.insert(b->pieces.end(), {static_cast<int64_t>(r), static_cast<int64_t>(d),
                                             static_cast<int64_t>(pc.doc),
                                             static_cast<int64_t>(pc.offset), n_in});
          segment(n_in);
        }
        filled += n;
      }
      int64_t real_in = std::min<int64_t>(filled, S);
      b->tokens += static_cast<uint64_t>(real_in);
      // A short window (the padded last sample without drop_last_partial): inputs past the
      // real tokens are pad_id; the labels there (the same memory, one later) are pad_id
      // too — only `ignore_index` is impossible in this layout. The last real input's
      // label is the first pad.
      if (filled < S + 1) {
        for (int64_t i = filled; i < S + 1; ++i) rw[i] = static_cast<T>(o.pad_id);
        if (real_in < S) {
          for (int64_t i = real_in; i < S; ++i)
            if (rpos) rpos[i] = static_cast<T>(o.reset_position_ids ? i - real_in : i);
          segment(S - real_in);
          b->pad_tokens += static_cast<uint64_t>(S - real_in);
        }
      }
    } else if (mode == PackMode::kConcat) {
      T* rin = static_cast<T*>(b->input_ids.data()) + r * S;
      T* rlab = static_cast<T*>(b->labels.data()) + r * S;
      T extra = 0;
      bool have_extra = false;
      // The window holds S + 1 tokens (fewer at the end of an epoch without drop_last).
      for (const Piece& pc : pieces) {
        TokenSpan sp = st.Document(pc.doc);
        STOKER_RETURN_IF_ERROR(check(st, pc, sp, pc.len));
        // Input positions [filled, filled + n_in), label positions [filled - 1, ...).
        int64_t n_in = std::min<int64_t>(static_cast<int64_t>(pc.len), S - filled);
        if (n_in > 0) {
          sp.CopyTo(pc.offset, static_cast<uint64_t>(n_in), rin + filled);
          positions(filled, n_in, 0);
          b->pieces.insert(b->pieces.end(), {static_cast<int64_t>(r), static_cast<int64_t>(d),
                                             static_cast<int64_t>(pc.doc),
                                             static_cast<int64_t>(pc.offset), n_in});
          segment(n_in);
        }
        // The window's token S (the last label) is in the piece that crosses position S.
        if (filled <= S && S < filled + static_cast<int64_t>(pc.len)) {
          extra = static_cast<T>(sp.At(pc.offset + static_cast<uint64_t>(S - filled)));
          have_extra = true;
        }
        filled += static_cast<int64_t>(pc.len);
      }
      int64_t real_in = std::min<int64_t>(filled, S);
      // labels[i] = window token i + 1: the inputs shifted by one, then the extra token.
      if (real_in > 1) std::memcpy(rlab, rin + 1, static_cast<size_t>(real_in - 1) * sizeof(T));
      if (have_extra) rlab[S - 1] = extra;
      int64_t real_lab = std::max<int64_t>(0, std::min<int64_t>(filled - 1, S));
      for (int64_t i = real_lab; i < S; ++i) rlab[i] = ignore;
      b->tokens += static_cast<uint64_t>(real_in);
      if (real_in < S) {
        for (int64_t i = real_in; i < S; ++i) {
          rin[i] = static_cast<T>(o.pad_id);
          if (rpos) rpos[i] = static_cast<T>(o.reset_position_ids ? i - real_in : i);
        }
        segment(S - real_in);
        b->pad_tokens += static_cast<uint64_t>(S - real_in);
      }
    } else {
      T* rin = static_cast<T*>(b->input_ids.data()) + r * S;
      T* rlab = static_cast<T*>(b->labels.data()) + r * S;
      for (const Piece& pc : pieces) {
        TokenSpan sp = st.Document(pc.doc);
        const int64_t n = static_cast<int64_t>(pc.len);
        STOKER_RETURN_IF_ERROR(check(st, pc, sp, pc.len));
        sp.CopyTo(pc.offset, pc.len, rin + filled);
        // Labels: the next token of the same document, if any.
        uint64_t avail = sp.length - pc.offset - 1;  // tokens after the piece's first
        int64_t n_lab = std::min<int64_t>(n, static_cast<int64_t>(avail));
        if (n_lab > 0) sp.CopyTo(pc.offset + 1, static_cast<uint64_t>(n_lab), rlab + filled);
        for (int64_t i = n_lab; i < n; ++i) rlab[filled + i] = ignore;
        positions(filled, n, 0);
        b->pieces.insert(b->pieces.end(), {static_cast<int64_t>(r), static_cast<int64_t>(d),
                                           static_cast<int64_t>(pc.doc),
                                           static_cast<int64_t>(pc.offset), n});
        segment(n);
        filled += n;
      }
      b->tokens += static_cast<uint64_t>(filled);
      if (filled < S) {
        for (int64_t i = filled; i < S; ++i) {
          rin[i] = static_cast<T>(o.pad_id);
          rlab[i] = ignore;
          if (rpos) rpos[i] = static_cast<T>(o.reset_position_ids ? i - filled : i);
        }
        segment(S - filled);
        b->pad_tokens += static_cast<uint64_t>(S - filled);
      }
    }
  }
  return Status::OK();
}

}  // namespace

Status TokenPipeline::Assemble(const Plan& p, Scratch* s, TokenBatch* b) const {
  b->step = p.step;
  b->first_sample = p.first_sample;
  const size_t n = p.rows.size();
  b->batch_size = static_cast<int>(n);
  b->seq_len = o_.index.seq_len;
  b->int64 = o_.int64_output;
  b->sample_ids.resize(n);
  b->epochs.resize(n);
  s->rows.resize(n);
  s->samples.resize(n);
  // In stages over all rows, so that the rows' cache misses overlap: the sample index
  // entries, then the store's index entries of their documents, then the pieces (the
  // token bytes are prefetched a row ahead of the copy, in Fill).
  for (size_t i = 0; i < n; ++i) {
    s->samples[i] = p.rows[i].index->SampleAt(p.rows[i].position);
    p.rows[i].index->PrefetchEntry(s->samples[i]);
  }
  for (size_t i = 0; i < n; ++i) p.rows[i].index->PrefetchDocuments(s->samples[i]);
  for (size_t i = 0; i < n; ++i) {
    s->rows[i].first = p.rows[i].corpus;
    p.rows[i].index->Pieces(s->samples[i], &s->rows[i].second);
    b->sample_ids[i] = static_cast<int64_t>(p.rows[i].global);
    b->epochs[i] = static_cast<int64_t>(p.rows[i].epoch);
  }
  return o_.int64_output ? Fill<int64_t>(o_, stores_, s->rows, o_.index.mode, b)
                         : Fill<int32_t>(o_, stores_, s->rows, o_.index.mode, b);
}

Result<TokenBatchPtr> TokenPipeline::Next() {
  while (prefetch_->CanPublish()) {
    STOKER_RETURN_IF_ERROR(PlanStep(prefetch_->NextPlan()));
    prefetch_->Publish();
  }
  auto t0 = std::chrono::steady_clock::now();
  Result<TokenBatchPtr> r = prefetch_->Pop();
  double dt = Since(t0);
  if (!r.ok()) {
    ResetPrefetch();  // the stream stays where the failed batch was
    return r.status();
  }
  delivered_global_ += static_cast<uint64_t>(o_.batch_size) * static_cast<uint64_t>(o_.world_size);
  std::lock_guard<std::mutex> l(stats_mu_);
  stats_.wait_s += dt;
  ++stats_.batches;
  stats_.samples += static_cast<uint64_t>((*r)->batch_size);
  stats_.tokens += (*r)->tokens;
  stats_.pad_tokens += (*r)->pad_tokens;
  return r;
}

void TokenPipeline::ResetPrefetch() {
  prefetch_->Drain();
  next_global_ = delivered_global_;
  blend_->Seek(next_global_);
}

uint64_t TokenPipeline::steps_per_epoch() const {
  return samples_per_epoch_ / (static_cast<uint64_t>(o_.batch_size) * o_.world_size);
}

TokenState TokenPipeline::state() const {
  TokenState s;
  s.seed = o_.index.seed;
  s.samples_consumed = delivered_global_;
  s.config_hash = config_hash_;
  BlendCursor c(blend_->weights());
  c.Seek(delivered_global_);
  s.blend_counts = c.counts();
  // Epoch of corpus 0 at the next sample.
  const Corpus& c0 = corpora_[0];
  uint64_t j = s.blend_counts[0];
  auto it = std::upper_bound(c0.epoch_start.begin(), c0.epoch_start.end(), j);
  if (it != c0.epoch_start.end()) {
    s.epoch = static_cast<uint64_t>(it - c0.epoch_start.begin()) - 1;
    s.sample_in_epoch = j - c0.epoch_start[s.epoch];
  } else {
    uint64_t n = c0.epoch_start.size() > 1 ? c0.epoch_start[1] : 1;
    s.epoch = j / n;
    s.sample_in_epoch = j % n;
  }
  return s;
}

Status TokenPipeline::SeekSamples(uint64_t consumed) {
  ResetPrefetch();
  delivered_global_ = next_global_ = consumed;
  blend_->Seek(consumed);
  return Status::OK();
}

Status TokenPipeline::Restore(const TokenState& s) {
  if (s.seed != o_.index.seed)
    return InvalidArgument("the state was saved with seed {}, this pipeline has seed {}", s.seed,
                           o_.index.seed);
  if (s.config_hash != 0 && s.config_hash != config_hash_)
    return InvalidArgument("the state was saved for other corpora or packing options (config "
                           "hash {:016x}, this pipeline {:016x}); resuming would not continue "
                           "the same sample stream", s.config_hash, config_hash_);
  BlendCursor c(blend_->weights());
  c.Seek(s.samples_consumed);
  if (!s.blend_counts.empty() && s.blend_counts != c.counts())
    return InvalidArgument("the state's blend counts do not match {} samples of this blend",
                           s.samples_consumed);
  return SeekSamples(s.samples_consumed);
}

TokenPipelineStats TokenPipeline::stats() const {
  std::lock_guard<std::mutex> l(stats_mu_);
  return stats_;
}

}  // namespace stoker::tokens
