#include "io/cache_env.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "io/fault_env.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

// A source directory of `n` files of `size` bytes (distinct contents) and an empty cache
// directory, removed at the end.
class CacheEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("stoker-cache-test-{}-{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "src");
    cache_dir_ = (root_ / "cache").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  void MakeFiles(int n, size_t size) {
    for (int i = 0; i < n; ++i) {
      std::string data(size, '\0');
      for (size_t k = 0; k < size; ++k) data[k] = static_cast<char>((k * 31 + i * 7) & 0xff);
      std::string p = Src(i);
      std::ofstream(p, std::ios::binary).write(data.data(), static_cast<std::streamsize>(size));
      contents_.push_back(data);
    }
  }
  std::string Src(int i) const { return (root_ / "src" / fmt::format("f{}.bin", i)).string(); }
  std::string EntryPath(int i) const {
    return cache_dir_ + "/entries/" + CacheEntryKey(Src(i));
  }

  std::unique_ptr<CacheEnv> Open(Env* backing, int64_t limit, bool demand = false,
                                 CacheOptions o = {}) {
    o.dir = cache_dir_;
    o.limit = limit;
    o.demand_fetch = demand;
    o.chunk_bytes = 16 << 10;
    auto c = CacheEnv::Open(backing, o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(c).value();
  }

  // Reads file i whole through `env` in 4 KiB reads and compares with what was written.
  void ReadAll(Env* env, int i) {
    auto f = env->NewRandomAccessFile(Src(i));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    std::string got((*f)->size(), '\0');
    for (size_t off = 0; off < got.size(); off += 4096) {
      auto r = (*f)->ReadAt(off, std::min<size_t>(4096, got.size() - off),
                            reinterpret_cast<uint8_t*>(&got[off]));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    }
    EXPECT_EQ(got, contents_[static_cast<size_t>(i)]) << "file " << i;
  }

  static std::vector<CachePlanItem> Plan(std::vector<std::pair<std::string, uint64_t>> uses) {
    std::vector<CachePlanItem> p;
    for (auto& [path, pos] : uses) p.push_back({path, pos, pos});
    return p;
  }

  fs::path root_;
  std::string cache_dir_;
  std::vector<std::string> contents_;
};

TEST_F(CacheEnvTest, LooksAheadInPlanOrderAndFetchesEachFileOnce) {
  MakeFiles(6, 64 << 10);
  FaultInjectionEnv src;
  auto cache = Open(&src, 100 << 20);
  std::vector<CachePlanItem> plan;
  for (int i = 0; i < 5; ++i) plan.push_back({Src(i), uint64_t(i), uint64_t(i)});  // not f5
  cache->SetPlan(plan);
  cache->WaitIdle();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(fs::exists(EntryPath(i))) << i;
  EXPECT_FALSE(fs::exists(EntryPath(5))) << "fetched a file the plan does not read";
  EXPECT_EQ(src.bytes_read.load(), 5 * (64 << 10));
  for (int i = 0; i < 6; ++i) ReadAll(cache.get(), i);
  auto c = cache->counters();
  EXPECT_EQ(c.fetches, 5u);
  EXPECT_EQ(c.hit_bytes, 5u * (64 << 10));
  EXPECT_DOUBLE_EQ(c.hit_rate(), 0.0);  // a cold run: everything came from the source
  EXPECT_EQ(c.stream_bytes, 64u << 10);  // f5: through, uncached
  EXPECT_FALSE(fs::exists(EntryPath(5)));
  EXPECT_EQ(src.bytes_read.load(), 6 * (64 << 10));  // nothing read twice from the source
  EXPECT_EQ(c.source_bytes, 6u * (64 << 10));
  EXPECT_EQ(cache->Occupancy(), 5 * (64 << 10));
}

TEST_F(CacheEnvTest, LimitSmallerThanAFileStreamsThrough) {
  MakeFiles(3, 64 << 10);
  FaultInjectionEnv src;
  auto cache = Open(&src, 10 << 10);
  cache->SetPlan(Plan({{Src(0), 0}, {Src(1), 1}, {Src(2), 2}}));
  cache->WaitIdle();
  for (int i = 0; i < 3; ++i) ReadAll(cache.get(), i);
  auto c = cache->counters();
  EXPECT_EQ(c.fetches, 0u);
  EXPECT_EQ(c.stream_bytes, 3u * (64 << 10));
  EXPECT_EQ(cache->Occupancy(), 0);
}

// Cache of two files; the order reads A, B, A, C. While B is read, C (needed at 3) may not
// evict A (needed at 2, sooner); once A is read again B is done, so C evicts B, and A is
// never fetched twice.
TEST_F(CacheEnvTest, EvictsWhatIsNotNeededAgainFirst) {
  MakeFiles(3, 64 << 10);
  FaultInjectionEnv src;
  auto cache = Open(&src, 2 * (64 << 10) + 100);
  std::string a = Src(0), b = Src(1), c = Src(2);
  cache->SetPlan(Plan({{a, 0}, {b, 1}, {a, 2}, {c, 3}}));
  cache->WaitIdle();
  EXPECT_TRUE(fs::exists(EntryPath(0)));
  EXPECT_TRUE(fs::exists(EntryPath(1)));
  EXPECT_FALSE(fs::exists(EntryPath(2))) << "a prefetch evicted an entry needed sooner";
  ReadAll(cache.get(), 0);
  ReadAll(cache.get(), 1);
  cache->WaitIdle();
  EXPECT_FALSE(fs::exists(EntryPath(2))) << "C evicted A, which is read before it";
  ReadAll(cache.get(), 0);  // position 2: B is done
  cache->WaitIdle();
  EXPECT_TRUE(fs::exists(EntryPath(0)));
  EXPECT_FALSE(fs::exists(EntryPath(1)));
  EXPECT_TRUE(fs::exists(EntryPath(2))) << "look-ahead did not fetch C once room was made";
  ReadAll(cache.get(), 2);
  cache->WaitIdle();
  auto k = cache->counters();
  EXPECT_EQ(k.fetches, 3u);
  EXPECT_EQ(k.evictions, 1u);
  EXPECT_EQ(k.hit_bytes, 4u * (64 << 10));
  EXPECT_EQ(src.bytes_read.load(), 3 * (64 << 10));
  EXPECT_LE(k.max_occupancy, 2 * (64 << 10) + 100);
}

// The race EvictsWhatIsNotNeededAgainFirst once lost (seen under ASan's timing): C's
// reservation lists the directory while A's fetch renames A.part to its entry; a scan that
// listed A.part and then found it gone counted A neither as a fetch in flight nor as an
// entry, so C took room that was not free (no eviction, occupancy above the limit). The
// hook holds A's commit until C has listed the directory, then lets C go on once A's entry
// exists; with commits under the space lock, A cannot commit while C scans, so C's wait
// gives up (after 2 s) and C counts A.part.
TEST_F(CacheEnvTest, ACommitDuringAScanIsCounted) {
  MakeFiles(3, 64 << 10);
  FaultInjectionEnv src;
  std::string ka = CacheEntryKey(Src(0)), kc = CacheEntryKey(Src(2));
  std::string entry_a = EntryPath(0);
  auto c_scanned = std::make_shared<std::atomic<bool>>(false);
  CacheOptions o;
  o.test_hook = [=](const char* point, const std::string& key) {
    auto wait_for = [](const std::function<bool()>& done) {
      for (int i = 0; i < 200 && !done(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    };
    if (std::string(point) == "commit" && key == ka) {
      wait_for([&] { return c_scanned->load(); });
    } else if (std::string(point) == "reserve-scanned" && key == kc) {
      c_scanned->store(true);
      wait_for([&] { return fs::exists(entry_a); });
    }
  };
  auto cache = Open(&src, 2 * (64 << 10) + 100, false, o);
  // A and B first, then C; nothing to evict for C (A and B are needed before it).
  cache->SetPlan(Plan({{Src(0), 0}, {Src(1), 1}, {Src(2), 2}}));
  cache->WaitIdle();
  EXPECT_TRUE(c_scanned->load()) << "C's reservation never ran";
  EXPECT_TRUE(fs::exists(EntryPath(0)));
  EXPECT_TRUE(fs::exists(EntryPath(1)));
  EXPECT_FALSE(fs::exists(EntryPath(2))) << "C took room held by A's entry";
  auto k = cache->counters();
  EXPECT_EQ(k.evictions, 0u);
  EXPECT_LE(k.max_occupancy, 2 * (64 << 10) + 100);
  EXPECT_LE(cache->Occupancy(), 2 * (64 << 10) + 100);
}

// The flaky CI failure of test_cache_s3 (fetched_bytes all there, fetches one short): a
// reader served from the `.part` finishes before the fetch commits, and counters read then
// must already count the fetch. The hook holds the fetch after its copy (the part still open
// to readers) until the file has been read whole and the counters looked at.
TEST_F(CacheEnvTest, AFetchIsCountedWithItsLastBytesNotAtItsCommit) {
  MakeFiles(1, 64 << 10);
  FaultInjectionEnv src;
  auto read = std::make_shared<std::atomic<bool>>(false);
  auto held = std::make_shared<std::atomic<bool>>(false);
  CacheOptions o;
  o.test_hook = [=](const char* point, const std::string&) {
    if (std::string(point) != "copied") return;
    held->store(true);
    for (int i = 0; i < 500 && !read->load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  auto cache = Open(&src, 1 << 20, /*demand=*/true, o);
  ReadAll(cache.get(), 0);  // served from the part: the fetch is held before it closes it
  for (int i = 0; i < 500 && !held->load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(held->load()) << "the fetch never finished its copy";
  auto k = cache->counters();
  read->store(true);
  EXPECT_EQ(k.fetched_bytes, 64u << 10);
  EXPECT_EQ(k.fetches, 1u) << "all bytes fetched but the fetch not counted yet";
  cache->WaitIdle();
  EXPECT_EQ(cache->counters().fetches, 1u);
  EXPECT_TRUE(fs::exists(EntryPath(0)));
}

// Across epochs: entries no plan needs are dropped least recently used first.
TEST_F(CacheEnvTest, LruAcrossEpochs) {
  MakeFiles(3, 64 << 10);
  FaultInjectionEnv src;
  auto cache = Open(&src, 2 * (64 << 10) + 100);
  cache->SetPlan(Plan({{Src(0), 0}, {Src(1), 1}}));
  ReadAll(cache.get(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct mtime stamps
  ReadAll(cache.get(), 1);
  cache->WaitIdle();
  cache->SetPlan(Plan({{Src(2), 0}}));  // next epoch reads only f2
  cache->WaitIdle();
  EXPECT_FALSE(fs::exists(EntryPath(0))) << "the least recently used goes first";
  EXPECT_TRUE(fs::exists(EntryPath(1)));
  EXPECT_TRUE(fs::exists(EntryPath(2)));
}

TEST_F(CacheEnvTest, DemandFetchWithoutPlan) {
  MakeFiles(2, 32 << 10);
  FaultInjectionEnv src;
  {
    auto cache = Open(&src, 1 << 20, /*demand=*/true);
    ReadAll(cache.get(), 0);
    cache->WaitIdle();
    EXPECT_TRUE(fs::exists(EntryPath(0)));
    EXPECT_FALSE(fs::exists(EntryPath(1)));
  }
  // A second process (a new CacheEnv) finds the entry and does not touch the source.
  int64_t before = src.bytes_read;
  auto again = Open(&src, 1 << 20, /*demand=*/true);
  ReadAll(again.get(), 0);
  EXPECT_EQ(src.bytes_read.load(), before);
  EXPECT_EQ(again->counters().shared_entries, 1u);
  EXPECT_DOUBLE_EQ(again->counters().hit_rate(), 1.0);
}

TEST_F(CacheEnvTest, DamagedOrStaleEntriesAreFetchedAgain) {
  MakeFiles(1, 64 << 10);
  FaultInjectionEnv src;
  {
    auto cache = Open(&src, 1 << 20, true);
    ReadAll(cache.get(), 0);
    cache->WaitIdle();
  }
  ASSERT_TRUE(fs::exists(EntryPath(0)));
  {
    // One flipped byte: the size matches, the CRC does not.
    std::fstream f(EntryPath(0), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x5a' ^ contents_[0][1000]);
  }
  {
    auto cache = Open(&src, 1 << 20, true);
    ReadAll(cache.get(), 0);
    cache->WaitIdle();
    EXPECT_EQ(cache->counters().corrupt_entries, 1u);
    EXPECT_EQ(cache->counters().fetches, 1u);
  }
  fs::resize_file(EntryPath(0), 100);  // truncated
  {
    auto cache = Open(&src, 1 << 20, true);
    ReadAll(cache.get(), 0);
    cache->WaitIdle();
    EXPECT_EQ(cache->counters().corrupt_entries, 1u);
  }
  // The source changes (new contents, new mtime): the entry no longer matches it.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  contents_[0][5] ^= 1;
  std::ofstream(Src(0), std::ios::binary).write(contents_[0].data(), 64 << 10);
  {
    auto cache = Open(&src, 1 << 20, true);
    ReadAll(cache.get(), 0);
    cache->WaitIdle();
    EXPECT_EQ(cache->counters().fetches, 1u);
  }
}

// A source that names its files' versions as an object store does (ETag) and reports one
// fixed mtime (Last-Modified has whole seconds), and counts the Stats it answers.
class VersionedEnv : public EnvWrapper {
 public:
  VersionedEnv() : EnvWrapper(Env::Default()) {}
  class File final : public RandomAccessFile {
   public:
    File(std::unique_ptr<RandomAccessFile> f, std::string v) : f_(std::move(f)), v_(std::move(v)) {}
    Result<size_t> ReadAt(uint64_t o, size_t n, uint8_t* d) const override { return f_->ReadAt(o, n, d); }
    uint64_t size() const override { return f_->size(); }
    const std::string& path() const override { return f_->path(); }
    std::string version() const override { return v_; }

   private:
    std::unique_ptr<RandomAccessFile> f_;
    std::string v_;
  };
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path,
                                                                const OpenOptions& o) override {
    STOKER_ASSIGN_OR_RETURN(auto f, EnvWrapper::NewRandomAccessFile(path, o));
    return std::unique_ptr<RandomAccessFile>(new File(std::move(f), version));
  }
  Result<FileInfo> Stat(const std::string& path) override {
    stats++;
    STOKER_ASSIGN_OR_RETURN(FileInfo fi, EnvWrapper::Stat(path));
    fi.mtime_ns = 1'000'000'000;
    fi.version = version;
    return fi;
  }
  std::string version = "\"v1\"";
  std::atomic<int> stats{0};
};

// An object rewritten with the same size within the same second keeps size and mtime; its
// version (ETag) is what tells the cache that its entry no longer holds the object's bytes.
TEST_F(CacheEnvTest, ANewVersionOfTheSameSizeAndMtimeIsFetchedAgain) {
  MakeFiles(1, 64 << 10);
  VersionedEnv src;
  {
    auto cache = Open(&src, 1 << 20, true);
    ReadAll(cache.get(), 0);
    cache->WaitIdle();
    EXPECT_EQ(cache->counters().fetches, 1u);
  }
  contents_[0][5] ^= 1;
  std::ofstream(Src(0), std::ios::binary).write(contents_[0].data(), 64 << 10);
  src.version = "\"v2\"";
  {
    auto cache = Open(&src, 1 << 20, true);
    ReadAll(cache.get(), 0);  // the new bytes, not the entry's
    cache->WaitIdle();
    EXPECT_EQ(cache->counters().fetches, 1u);
  }
  {
    auto cache = Open(&src, 1 << 20, true);  // and that entry then serves
    ReadAll(cache.get(), 0);
    cache->WaitIdle();
    EXPECT_EQ(cache->counters().fetches, 0u);
    EXPECT_EQ(cache->counters().hit_bytes, 64u << 10);
  }
}

// The dataset's open asks the source for each file; the first plan keeps those answers, each
// later plan (an epoch) asks again once per file, in the background, however many readers
// open the file meanwhile.
TEST_F(CacheEnvTest, SourcesAreAskedOncePerEpoch) {
  MakeFiles(3, 16 << 10);
  VersionedEnv src;
  auto cache = Open(&src, 1 << 20);
  std::vector<std::unique_ptr<RandomAccessFile>> open;
  for (int i = 0; i < 3; ++i) open.push_back(std::move(cache->NewRandomAccessFile(Src(i))).value());
  EXPECT_EQ(src.stats.load(), 3);
  cache->SetPlan(Plan({{Src(0), 0}, {Src(1), 1}, {Src(2), 2}}));
  for (int i = 0; i < 3; ++i) ReadAll(cache.get(), i);
  cache->WaitIdle();
  EXPECT_EQ(src.stats.load(), 3) << "the first plan asked the source again";
  cache->SetPlan(Plan({{Src(2), 0}, {Src(1), 1}, {Src(0), 2}}));
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&] {
      for (int i = 2; i >= 0; --i) ReadAll(cache.get(), i);
    });
  for (auto& t : readers) t.join();
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (src.stats.load() < 6 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(src.stats.load(), 6);
}

// A handle opened with OpenOptions::direct (a format's checks at open) reads an entry that is
// there, and otherwise the source, without starting a fetch of the whole file.
TEST_F(CacheEnvTest, ADirectOpenPeeksWithoutFetching) {
  MakeFiles(1, 64 << 10);
  FaultInjectionEnv src;
  OpenOptions direct;
  direct.direct = true;
  uint8_t b[16];
  {
    auto cache = Open(&src, 1 << 20, /*demand=*/true);
    auto f = cache->NewRandomAccessFile(Src(0), direct);
    ASSERT_TRUE(f.ok());
    auto r0 = (*f)->ReadAt(100, sizeof b, b);
    ASSERT_TRUE(r0.ok()) << r0.status().ToString();
    EXPECT_EQ(std::string(reinterpret_cast<char*>(b), sizeof b), contents_[0].substr(100, sizeof b));
    cache->WaitIdle();
    EXPECT_EQ(cache->counters().fetches, 0u);
    EXPECT_EQ(cache->counters().stream_bytes, sizeof b);
    ReadAll(cache.get(), 0);  // a normal read fetches it
    cache->WaitIdle();
    EXPECT_EQ(cache->counters().fetches, 1u);
  }
  auto cache = Open(&src, 1 << 20, /*demand=*/true);
  auto f = cache->NewRandomAccessFile(Src(0), direct);
  ASSERT_TRUE(f.ok());
  auto r = (*f)->ReadAt(100, sizeof b, b);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(cache->counters().hit_bytes, sizeof b);
  EXPECT_EQ(cache->counters().stream_bytes, 0u);
}

// A read of the part of a file already fetched does not wait for the rest of it.
TEST_F(CacheEnvTest, ReadsOfTheFetchedPrefixDoNotWaitForTheWholeFile) {
  MakeFiles(1, 512 << 10);
  FaultInjectionEnv slow;
  FaultRule r;
  r.path_contains = "f0.bin";
  r.read_latency_us = 50000;  // 32 chunks of 16 KiB: 1.6 s for the whole file
  slow.AddRule(r);
  auto cache = Open(&slow, 8 << 20);
  cache->SetPlan({{Src(0), 0, 0}});
  auto f = cache->NewRandomAccessFile(Src(0));
  ASSERT_TRUE(f.ok());
  std::string got(4096, '\0');
  ASSERT_TRUE((*f)->ReadExact(0, got.size(), reinterpret_cast<uint8_t*>(got.data())).ok());
  EXPECT_EQ(got, contents_[0].substr(0, 4096));
  EXPECT_FALSE(fs::exists(EntryPath(0))) << "the first 4 KiB waited for the whole file";
  ReadAll(cache.get(), 0);
  EXPECT_EQ(slow.bytes_read.load(), 512 << 10);
}

// A fetch killed with SIGKILL halfway never leaves an entry that looks complete, and the
// next process fetches the file again (reclaiming the stale .part).
TEST_F(CacheEnvTest, KillNineMidFetchLeavesNoCompleteEntry) {
  MakeFiles(1, 512 << 10);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FaultInjectionEnv slow;
    FaultRule r;
    r.path_contains = "f0.bin";
    r.read_latency_us = 20000;  // 32 chunks of 16 KiB: about 0.6 s
    slow.AddRule(r);
    CacheOptions o;
    o.dir = cache_dir_;
    o.limit = 8 << 20;
    o.chunk_bytes = 16 << 10;
    auto c = CacheEnv::Open(&slow, o);
    if (!c.ok()) ::_exit(2);
    (*c)->SetPlan({{Src(0), 0, 0}});
    (*c)->WaitIdle();
    ::_exit(0);  // not reached before the kill
  }
  std::string part = EntryPath(0) + ".part";
  bool seen = false;
  for (int i = 0; i < 500 && !seen; ++i) {  // until it has written some data (or 5 s)
    struct stat st;
    seen = ::stat(part.c_str(), &st) == 0 && st.st_blocks > 0;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(seen) << "the child never started its fetch";
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child finished before the kill";
  EXPECT_FALSE(fs::exists(EntryPath(0))) << "a killed fetch left a complete-looking entry";
  FaultInjectionEnv src;
  auto cache = Open(&src, 8 << 20);
  cache->SetPlan({{Src(0), 0, 0}});
  ReadAll(cache.get(), 0);
  cache->WaitIdle();
  EXPECT_TRUE(fs::exists(EntryPath(0)));
  EXPECT_FALSE(fs::exists(part));
  EXPECT_EQ(cache->counters().fetches, 1u);
}

// Four processes with the same plan over a slow source: each file crosses from the source
// once for all of them; the others wait on its entry lock and read the shared copy.
TEST_F(CacheEnvTest, ProcessesOfANodeShareOneCopy) {
  const int kFiles = 8, kProcs = 4;
  const size_t kSize = 96 << 10;
  MakeFiles(kFiles, kSize);
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      FaultInjectionEnv slow;
      FaultRule r;
      r.path_contains = "/src/";
      r.read_latency_us = 2000;
      slow.AddRule(r);
      CacheOptions o;
      o.dir = cache_dir_;
      o.limit = 64 << 20;
      o.chunk_bytes = 16 << 10;
      o.demand_fetch = false;
      auto c = CacheEnv::Open(&slow, o);
      if (!c.ok()) ::_exit(2);
      std::vector<CachePlanItem> plan;
      for (int i = 0; i < kFiles; ++i) plan.push_back({Src(i), uint64_t(i), uint64_t(i)});
      (*c)->SetPlan(plan);
      std::vector<uint8_t> buf(kSize);
      for (int i = 0; i < kFiles; ++i) {
        auto f = (*c)->NewRandomAccessFile(Src(i));
        if (!f.ok() || !(*f)->ReadExact(0, kSize, buf.data()).ok()) ::_exit(3);
        if (std::memcmp(buf.data(), contents_[static_cast<size_t>(i)].data(), kSize) != 0)
          ::_exit(4);
      }
      (*c)->WaitIdle();
      std::ofstream(root_ / fmt::format("proc{}.txt", p))
          << slow.bytes_read.load() << " " << (*c)->counters().fetches << "\n";
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ::waitpid(k, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  int64_t source = 0, fetches = 0;
  for (int p = 0; p < kProcs; ++p) {
    std::ifstream in(root_ / fmt::format("proc{}.txt", p));
    int64_t b = -1, f = -1;
    in >> b >> f;
    ASSERT_GE(b, 0);
    source += b;
    fetches += f;
  }
  EXPECT_EQ(source, kFiles * static_cast<int64_t>(kSize)) << "bytes read from the source";
  EXPECT_EQ(fetches, kFiles);
}

TEST(CacheEnvOptions, BadOptionsAreErrors) {
  CacheOptions o;
  EXPECT_EQ(CacheEnv::Open(Env::Default(), o).status().code(), StatusCode::kInvalidArgument);
  o.dir = "/tmp/x";
  o.limit = 0;
  EXPECT_EQ(CacheEnv::Open(Env::Default(), o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker
