#include "io/readahead.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace stoker {

namespace {

std::atomic<uint64_t> g_budget{512ull << 20}, g_in_use{0};
std::atomic<uint64_t> g_fetches{0}, g_prefetches{0}, g_direct{0}, g_budget_misses{0};

bool TryCharge(uint64_t n) {
  uint64_t cur = g_in_use.load(std::memory_order_relaxed);
  for (;;) {
    if (cur + n > g_budget.load(std::memory_order_relaxed)) return false;
    if (g_in_use.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed)) return true;
  }
}

// Block buffers, reused: a fresh 2 MiB buffer per block was zero-filled (std::vector) and,
// being above malloc's mmap threshold, page-faulted in and returned to the kernel each time
// (memset, page faults and page clearing were ~13 % of an S3 read's CPU). Up to kKeep free
// buffers of each size are kept.
class BufferPool {
 public:
  struct Buffer {
    std::unique_ptr<uint8_t[]> p;
    size_t n = 0;
    uint8_t* data() { return p.get(); }
    const uint8_t* data() const { return p.get(); }
    size_t size() const { return n; }
  };
  static Buffer Take(size_t n) {
    BufferPool& pool = Get();
    {
      std::lock_guard<std::mutex> lk(pool.mu_);
      auto& v = pool.free_[n];
      if (!v.empty()) {
        Buffer b = std::move(v.back());
        v.pop_back();
        return b;
      }
    }
    Buffer b;
    b.p.reset(new uint8_t[n]);  // not zero-filled: every byte is written by the read
    b.n = n;
    return b;
  }
  static void Give(Buffer b) {
    if (!b.p) return;
    BufferPool& pool = Get();
    std::lock_guard<std::mutex> lk(pool.mu_);
    auto& v = pool.free_[b.n];
    if (v.size() < kKeep) v.push_back(std::move(b));
  }

 private:
  static constexpr size_t kKeep = 16;
  static BufferPool& Get() {
    static BufferPool* pool = new BufferPool;  // never destroyed: blocks may outlive statics
    return *pool;
  }
  std::mutex mu_;
  std::map<size_t, std::vector<Buffer>> free_;
};

struct Block {
  explicit Block(uint64_t k, uint64_t charged) : index(k), charged(charged) {}
  ~Block() {
    g_in_use.fetch_sub(charged, std::memory_order_relaxed);
    BufferPool::Give(std::move(data));
  }
  uint64_t index;
  uint64_t charged;     // budget bytes, released when the last reader lets go
  BufferPool::Buffer data;
  bool ready = false;   // guarded by State::mu
  Status st;            // guarded by State::mu once ready
};

struct State {
  std::shared_ptr<RandomAccessFile> file;
  ReadAheadOptions opts;
  uint64_t size = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::shared_ptr<Block>> blocks;  // guarded by mu
  uint64_t last_end = 0;                               // guarded by mu
  // The furthest block the current run of sequential reads has reached (guarded by mu): a
  // block further behind it that is missing was dropped after use, and a reader that still
  // needs it (preempted) reads just its bytes instead of fetching the block again.
  uint64_t lead = 0;
  bool any = false;                                    // guarded by mu

  uint64_t BlockLen(uint64_t k) const {
    uint64_t b = k * opts.block_bytes;
    return std::min<uint64_t>(opts.block_bytes, size - b);
  }
};

void Fetch(const std::shared_ptr<State>& s, const std::shared_ptr<Block>& b) {
  uint64_t len = s->BlockLen(b->index);
  BufferPool::Buffer data = BufferPool::Take(len);
  Status st = s->file->ReadExact(b->index * s->opts.block_bytes, len, data.data());
  g_fetches.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(s->mu);
    b->data = std::move(data);
    b->st = st;
    b->ready = true;
  }
  s->cv.notify_all();
}

class ReadAheadFile final : public RandomAccessFile {
 public:
  explicit ReadAheadFile(std::shared_ptr<State> s) : s_(std::move(s)) {}

  Result<size_t> ReadAt(uint64_t off, size_t n, uint8_t* dst) const override {
    State& s = *s_;
    if (off >= s.size || n == 0) return size_t{0};
    n = static_cast<size_t>(std::min<uint64_t>(n, s.size - off));
    if (n > s.opts.max_small_read) return s.file->ReadAt(off, n, dst);
    const uint64_t B = s.opts.block_bytes;
    bool sequential;
    {
      std::lock_guard<std::mutex> lk(s.mu);
      // Follows the previous reads when it starts within a block of where they ended (several
      // threads reading one shard's samples in order arrive a little out of order); the first
      // read counts when it is in the first block. Any other read starts a new run.
      sequential = s.any ? off + B >= s.last_end && off <= s.last_end + B : off < B;
      const uint64_t ke = (off + n - 1) / B;
      s.lead = sequential && s.any ? std::max(s.lead, ke) : ke;
      s.any = true;
      s.last_end = off + n;
    }
    size_t done = 0;
    while (done < n) {
      const uint64_t pos = off + done;
      const uint64_t k = pos / B;
      std::shared_ptr<Block> b;
      bool fetch_here = false;
      {
        std::lock_guard<std::mutex> lk(s.mu);
        auto it = s.blocks.find(k);
        if (it != s.blocks.end()) {
          b = it->second;
        } else if (sequential && k + 1 >= s.lead && TryCharge(s.BlockLen(k))) {
          // (A block further behind the run's lead was dropped after use: a reader that
          // still needs it, preempted, reads just its bytes below rather than the block.)
          b = std::make_shared<Block>(k, s.BlockLen(k));
          s.blocks[k] = b;
          fetch_here = true;
        } else {
          (sequential ? g_budget_misses : g_direct).fetch_add(1, std::memory_order_relaxed);
          b = nullptr;
        }
        if (b) {
          // Only a read that follows the run drops blocks: one from a reader far behind the
          // others (preempted) must not drop the blocks they fetched ahead.
          if (sequential) EvictAround(k);
          if (sequential || !fetch_here) Prefetch(k);
        }
      }
      if (!b) return Direct(pos, n - done, dst + done, done);
      if (fetch_here) Fetch(s_, b);
      Status st;
      {
        std::unique_lock<std::mutex> lk(s.mu);
        s.cv.wait(lk, [&] { return b->ready; });
        st = b->st;
        if (!st.ok()) {
          auto it = s.blocks.find(k);
          if (it != s.blocks.end() && it->second == b) s.blocks.erase(it);
        }
      }
      // A block that could not be fetched: one more try of just this read, whose error
      // (naming the path and range) is the caller's.
      if (!st.ok()) return Direct(pos, n - done, dst + done, done);
      uint64_t in_block = pos - k * B;
      size_t take = static_cast<size_t>(std::min<uint64_t>(n - done, b->data.size() - in_block));
      std::memcpy(dst + done, b->data.data() + in_block, take);
      done += take;
    }
    return n;
  }

  uint64_t size() const override { return s_->size; }
  const std::string& path() const override { return s_->file->path(); }

  int Warm(uint64_t offset) const {
    State& s = *s_;
    if (!s.opts.executor || offset >= s.size) return 0;
    const uint64_t k = offset / s.opts.block_bytes;
    std::lock_guard<std::mutex> lk(s.mu);
    s.any = true;  // reads from `offset` on are the run now
    s.last_end = offset;
    s.lead = k;
    int started = 0;
    for (int a = 0; a < std::max(1, s.opts.ahead); ++a) {
      uint64_t j = k + static_cast<uint64_t>(a);
      if (j * s.opts.block_bytes >= s.size) break;
      if (s.blocks.count(j)) continue;
      if (!TryCharge(s.BlockLen(j))) break;
      auto b = std::make_shared<Block>(j, s.BlockLen(j));
      s.blocks[j] = b;
      g_prefetches.fetch_add(1, std::memory_order_relaxed);
      std::shared_ptr<State> keep = s_;
      s.opts.executor([keep, b] { Fetch(keep, b); });
      ++started;
    }
    return started;
  }
  std::string version() const override { return s_->file->version(); }

 private:
  Result<size_t> Direct(uint64_t pos, size_t n, uint8_t* dst, size_t done) const {
    STOKER_ASSIGN_OR_RETURN(size_t got, s_->file->ReadAt(pos, n, dst));
    return done + got;
  }

  // Drops the ready blocks behind the one in use (keeping the one before it, for readers a
  // little behind). Blocks ahead are kept: they were fetched for this run, or are valid data
  // left by an earlier run that a later one may reach; when a file holds more than twice its
  // window, the ready blocks farthest from k go first.
  void EvictAround(uint64_t k) const {
    State& s = *s_;
    for (auto it = s.blocks.begin(); it != s.blocks.end();) {
      if (it->first + 1 < k && it->second->ready) {
        it = s.blocks.erase(it);
      } else {
        ++it;
      }
    }
    const size_t cap = 2 * static_cast<size_t>(std::max(1, s.opts.ahead)) + 4;
    while (s.blocks.size() > cap) {
      auto far = s.blocks.end();
      uint64_t dist = 0;
      for (auto it = s.blocks.begin(); it != s.blocks.end(); ++it) {
        uint64_t d = it->first > k ? it->first - k : k - it->first;
        if (it->second->ready && d > dist) {
          dist = d;
          far = it;
        }
      }
      if (far == s.blocks.end()) break;
      s.blocks.erase(far);
    }
  }

  void Prefetch(uint64_t k) const {
    State& s = *s_;
    if (!s.opts.executor) return;
    for (int a = 1; a <= s.opts.ahead; ++a) {
      uint64_t j = k + static_cast<uint64_t>(a);
      if (j * s.opts.block_bytes >= s.size || s.blocks.count(j)) continue;
      if (!TryCharge(s.BlockLen(j))) return;
      auto b = std::make_shared<Block>(j, s.BlockLen(j));
      s.blocks[j] = b;
      g_prefetches.fetch_add(1, std::memory_order_relaxed);
      std::shared_ptr<State> keep = s_;
      s.opts.executor([keep, b] { Fetch(keep, b); });
    }
  }

  std::shared_ptr<State> s_;
};

}  // namespace

void SetReadAheadBudget(uint64_t bytes) { g_budget.store(bytes); }

ReadAheadCounters GetReadAheadCounters() {
  ReadAheadCounters c;
  c.block_fetches = g_fetches.load();
  c.prefetches = g_prefetches.load();
  c.direct_reads = g_direct.load();
  c.budget_misses = g_budget_misses.load();
  c.bytes_in_use = g_in_use.load();
  return c;
}

int WarmReadAhead(const RandomAccessFile& file, uint64_t offset) {
  auto* ra = dynamic_cast<const ReadAheadFile*>(&file);
  return ra ? ra->Warm(offset) : 0;
}

std::unique_ptr<RandomAccessFile> NewReadAheadFile(std::shared_ptr<RandomAccessFile> file,
                                                   const ReadAheadOptions& opts) {
  auto s = std::make_shared<State>();
  s->size = file->size();
  s->file = std::move(file);
  s->opts = opts;
  if (s->opts.block_bytes == 0) s->opts.block_bytes = 8ull << 20;
  if (s->opts.ahead < 0) s->opts.ahead = 0;
  return std::make_unique<ReadAheadFile>(std::move(s));
}

}  // namespace stoker
