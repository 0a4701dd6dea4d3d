#include "io/readahead.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace stoker {
namespace {

// A file in memory that counts its reads (each would be one GET on an object store) and can
// be told to fail reads that touch a given byte.
class CountingFile final : public RandomAccessFile {
 public:
  explicit CountingFile(size_t n) : data_(n), path_("s3://b/shard.tar") {
    for (size_t i = 0; i < n; ++i) data_[i] = static_cast<uint8_t>((i * 7919) >> 3);
  }
  Result<size_t> ReadAt(uint64_t off, size_t n, uint8_t* dst) const override {
    reads.fetch_add(1);
    bytes.fetch_add(n);
    if (fail_at >= 0 && static_cast<uint64_t>(fail_at) >= off &&
        static_cast<uint64_t>(fail_at) < off + n && fail_count.fetch_sub(1) > 0)
      return IOError("{}: read bytes [{}, {}): injected", path_, off, off + n);
    if (off >= data_.size()) return size_t{0};
    size_t k = std::min<size_t>(n, data_.size() - off);
    std::memcpy(dst, data_.data() + off, k);
    return k;
  }
  uint64_t size() const override { return data_.size(); }
  const std::string& path() const override { return path_; }
  std::string version() const override { return "\"etag\""; }
  const std::vector<uint8_t>& data() const { return data_; }

  mutable std::atomic<uint64_t> reads{0}, bytes{0};
  int64_t fail_at = -1;
  mutable std::atomic<int> fail_count{0};

 private:
  std::vector<uint8_t> data_;
  std::string path_;
};

ReadAheadOptions Opts(uint64_t block, bool prefetch, std::vector<std::thread>* threads,
                      std::mutex* mu) {
  ReadAheadOptions o;
  o.block_bytes = block;
  o.max_small_read = block / 2;
  if (prefetch)
    o.executor = [threads, mu](std::function<void()> fn) {
      std::lock_guard<std::mutex> lk(*mu);
      threads->emplace_back(std::move(fn));
    };
  return o;
}

void Join(std::vector<std::thread>* threads, std::mutex* mu) {
  for (;;) {
    std::vector<std::thread> t;
    {
      std::lock_guard<std::mutex> lk(*mu);
      t.swap(*threads);
    }
    if (t.empty()) return;
    for (auto& x : t) x.join();
  }
}

// A tar scanned header by header and the samples read in order: one read per block, not one
// per header or sample; the bytes are the file's.
TEST(ReadAhead, SequentialSmallReadsBecomeOneReadPerBlock) {
  auto base = std::make_shared<CountingFile>(10 << 20);  // 10 MiB, 1 MiB blocks
  std::vector<std::thread> threads;
  std::mutex mu;
  auto f = NewReadAheadFile(base, Opts(1 << 20, true, &threads, &mu));
  EXPECT_EQ(f->size(), base->size());
  EXPECT_EQ(f->path(), base->path());
  EXPECT_EQ(f->version(), "\"etag\"");
  std::vector<uint8_t> buf(96 << 10);
  uint64_t small = 0;
  for (uint64_t off = 0; off < base->size(); off += 512 + buf.size()) {
    uint8_t h[512];
    ASSERT_EQ(*f->ReadAt(off, 512, h), 512u);  // a header
    ASSERT_EQ(0, std::memcmp(h, base->data().data() + off, 512));
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), base->size() - off - 512));
    auto r = f->ReadAt(off + 512, n, buf.data());  // its member
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, n);
    ASSERT_EQ(0, std::memcmp(buf.data(), base->data().data() + off + 512, n)) << off;
    small += 2;
  }
  Join(&threads, &mu);
  EXPECT_GE(small, 200u);
  EXPECT_EQ(base->reads.load(), 10u);  // the ten blocks, each once (most of them prefetched)
  EXPECT_EQ(base->bytes.load(), base->size());
}

// Warming a file (the next shard of the plan) fetches its first `ahead` blocks before any
// read; reads that then start at the warmed offset find them (no second fetch), and read on.
TEST(ReadAhead, WarmFetchesTheFirstBlocksBeforeTheFirstRead) {
  auto base = std::make_shared<CountingFile>(6 << 20);
  std::vector<std::thread> threads;
  std::mutex mu;
  ReadAheadOptions o = Opts(1 << 20, true, &threads, &mu);
  o.ahead = 3;
  auto f = NewReadAheadFile(base, o);
  EXPECT_EQ(WarmReadAhead(*f, 0), 3);
  EXPECT_EQ(WarmReadAhead(*f, 0), 0);  // already in flight: nothing new
  Join(&threads, &mu);
  EXPECT_EQ(base->reads.load(), 3u);
  EXPECT_EQ(base->bytes.load(), 3u << 20);
  std::vector<uint8_t> buf(64 << 10);
  for (uint64_t off = 0; off < (3u << 20); off += buf.size()) {
    ASSERT_EQ(*f->ReadAt(off, buf.size(), buf.data()), buf.size());
    ASSERT_EQ(0, std::memcmp(buf.data(), base->data().data() + off, buf.size())) << off;
  }
  Join(&threads, &mu);
  // The three warmed blocks were not fetched again; reading on fetched the rest once each.
  EXPECT_EQ(base->reads.load(), 6u);
  EXPECT_EQ(base->bytes.load(), base->size());

  // A file that is not a read-ahead file, or one without an executor, is not warmed.
  EXPECT_EQ(WarmReadAhead(*base, 0), 0);
  auto g = NewReadAheadFile(base, Opts(1 << 20, false, &threads, &mu));
  EXPECT_EQ(WarmReadAhead(*g, 0), 0);
}

// Random single reads into a large file are not turned into blocks: no extra bytes.
TEST(ReadAhead, RandomReadsGoToTheFileAsTheyAre) {
  auto base = std::make_shared<CountingFile>(64 << 20);
  std::vector<std::thread> threads;
  std::mutex mu;
  auto f = NewReadAheadFile(base, Opts(1 << 20, true, &threads, &mu));
  std::mt19937_64 rng(3);
  std::vector<uint8_t> buf(4096);
  uint8_t first[16];
  ASSERT_TRUE(f->ReadAt(40 << 20, 16, first).ok());  // first read far into the file: direct
  for (int i = 0; i < 50; ++i) {
    uint64_t off = (rng() % 60) * (1 << 20) + 12345;  // at least a block away from the last
    off = (off / (4 << 20)) * (4 << 20) + (i % 2) * (2 << 20) + 17;
    ASSERT_EQ(*f->ReadAt(off, buf.size(), buf.data()), buf.size());
    ASSERT_EQ(0, std::memcmp(buf.data(), base->data().data() + off, buf.size()));
  }
  Join(&threads, &mu);
  EXPECT_LT(base->bytes.load(), 64u * 4096 + 3 * (1 << 20)) << base->reads.load();
}

// Several threads reading one shard's samples (each a run of consecutive samples, as the
// pipeline's workers do): the right bytes for everyone, each block fetched about once.
TEST(ReadAhead, ConcurrentReadersShareTheBlocks) {
  auto base = std::make_shared<CountingFile>(16 << 20);
  std::vector<std::thread> prefetchers;
  std::mutex mu;
  auto f = NewReadAheadFile(base, Opts(1 << 20, true, &prefetchers, &mu));
  const size_t sample = 100 << 10;
  const size_t count = base->size() / sample;
  std::atomic<size_t> next{0};
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      std::vector<uint8_t> buf(sample);
      for (size_t i; (i = next.fetch_add(1)) < count;) {
        auto r = f->ReadAt(i * sample, sample, buf.data());
        if (!r.ok() || *r != sample ||
            std::memcmp(buf.data(), base->data().data() + i * sample, sample) != 0)
          bad.fetch_add(1);
      }
    });
  for (auto& t : ts) t.join();
  Join(&prefetchers, &mu);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(base->reads.load(), 16u + 4u);  // 16 blocks; a few direct reads at most
  EXPECT_LE(base->bytes.load(), base->size() + 4 * sample);
}

// A block that cannot be fetched is not kept: the read that needed it tries once more on its
// own and returns that error, naming the path and range; the next read succeeds.
TEST(ReadAhead, AFailedBlockFallsBackToTheReadItself) {
  auto base = std::make_shared<CountingFile>(4 << 20);
  base->fail_at = (1 << 20) + 10;
  base->fail_count = 2;  // the block fetch and the direct retry fail
  auto f = NewReadAheadFile(base, Opts(1 << 20, false, nullptr, nullptr));
  uint8_t b[100];
  ASSERT_TRUE(f->ReadAt(0, 100, b).ok());
  auto r = f->ReadAt((1 << 20), 100, b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("s3://b/shard.tar"), std::string::npos);
  EXPECT_NE(r.status().message().find("[1048576, 1048676)"), std::string::npos)
      << r.status().message();
  r = f->ReadAt((1 << 20) + 200, 100, b);  // the fault is gone: now it reads
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(0, std::memcmp(b, base->data().data() + (1 << 20) + 200, 100));
}

// The process-wide budget bounds the blocks held; beyond it reads go to the file directly.
TEST(ReadAhead, TheBudgetBoundsTheBlocksHeld) {
  SetReadAheadBudget(2 << 20);  // two 1 MiB blocks
  {
    auto base = std::make_shared<CountingFile>(8 << 20);
    auto f1 = NewReadAheadFile(base, Opts(1 << 20, false, nullptr, nullptr));
    auto f2 = NewReadAheadFile(base, Opts(1 << 20, false, nullptr, nullptr));
    auto f3 = NewReadAheadFile(base, Opts(1 << 20, false, nullptr, nullptr));
    uint8_t b[64];
    ASSERT_TRUE(f1->ReadAt(0, 64, b).ok());
    ASSERT_TRUE(f2->ReadAt(0, 64, b).ok());
    EXPECT_EQ(GetReadAheadCounters().bytes_in_use, 2u << 20);
    uint64_t misses = GetReadAheadCounters().budget_misses;
    ASSERT_TRUE(f3->ReadAt(0, 64, b).ok());  // no room: read directly, still the right bytes
    EXPECT_EQ(0, std::memcmp(b, base->data().data(), 64));
    EXPECT_EQ(GetReadAheadCounters().budget_misses, misses + 1);
    EXPECT_LE(GetReadAheadCounters().bytes_in_use, 2u << 20);
  }
  EXPECT_EQ(GetReadAheadCounters().bytes_in_use, 0u);  // closed files give their blocks back
  SetReadAheadBudget(512ull << 20);
}

// Reads past the end, across the last partial block, and larger than max_small_read.
TEST(ReadAhead, EdgesOfTheFile) {
  auto base = std::make_shared<CountingFile>((3 << 20) + 777);
  auto f = NewReadAheadFile(base, Opts(1 << 20, false, nullptr, nullptr));
  std::vector<uint8_t> b(4 << 20);
  EXPECT_EQ(*f->ReadAt(base->size(), 10, b.data()), 0u);
  auto r = f->ReadAt((3 << 20) - 100, 2000, b.data());  // spans the last two blocks, ends at EOF
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 877u);
  EXPECT_EQ(0, std::memcmp(b.data(), base->data().data() + (3 << 20) - 100, 877));
  uint64_t before = base->reads.load();
  r = f->ReadAt(0, 3 << 20, b.data());  // large: one read of the file itself
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(base->reads.load(), before + 1);
}

}  // namespace
}  // namespace stoker
