#include "tools/probe.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace stoker {
namespace {

namespace fs = std::filesystem;

class ProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stoker_probe_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  ProbeOptions Small() {
    ProbeOptions o;
    o.path = dir_;
    o.file_bytes = 1 << 20;
    o.block_sizes = {4096, 65536};
    o.concurrency = {1, 2};
    o.clock = &clock_;  // never advances: every pass runs to its byte budget, not a deadline
    return o;
  }
  std::string dir_;
  FakeClock clock_;
};

TEST_F(ProbeTest, SequentialPassesReadTheWholeFileRandomPassesAFileWorth) {
  ProbeOptions o = Small();
  std::vector<std::string> progress;
  o.progress = [&](size_t done, size_t total, const std::string& what) {
    EXPECT_LE(done, total);
    progress.push_back(what);
  };
  auto r = RunStorageProbe(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->created);
  EXPECT_EQ(r->file_bytes, 1u << 20);
  EXPECT_TRUE(r->cache_mode == "O_DIRECT" || r->cache_mode == "fadvise(DONTNEED)");
  ASSERT_EQ(r->points.size(), 8u);
  EXPECT_EQ(progress.size(), 8u);
  for (const auto& p : r->points) {
    EXPECT_EQ(p.bytes, p.ops * p.block) << p.pattern;
    if (p.pattern == "seq") {
      EXPECT_EQ(p.bytes, 1u << 20) << p.block << " x" << p.threads;
      EXPECT_EQ(p.ops, (1u << 20) / p.block);
    } else {
      EXPECT_GE(p.bytes, 1u << 20);
      EXPECT_LT(p.bytes, (1u << 20) + p.threads * p.block + 1);
    }
  }
  // The created test file is removed afterwards.
  EXPECT_FALSE(fs::exists(dir_ + "/stoker-probe.bin"));
}

TEST_F(ProbeTest, KeptFileIsReusedAndAnExistingFileCanBeProbed) {
  ProbeOptions o = Small();
  o.keep_file = true;
  o.allow_direct = false;
  o.random = false;
  auto r = RunStorageProbe(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->cache_mode, "fadvise(DONTNEED)");
  EXPECT_TRUE(fs::exists(dir_ + "/stoker-probe.bin"));
  auto again = RunStorageProbe(o);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created);
  ProbeOptions f = Small();
  f.path = dir_ + "/stoker-probe.bin";
  f.sequential = false;
  auto byfile = RunStorageProbe(f);
  ASSERT_TRUE(byfile.ok()) << byfile.status().ToString();
  EXPECT_EQ(byfile->file, f.path);
  EXPECT_EQ(byfile->points.size(), 4u);
}

TEST_F(ProbeTest, BadOptionsAreInvalidArgument) {
  ProbeOptions o = Small();
  o.block_sizes = {1000};
  EXPECT_EQ(RunStorageProbe(o).status().code(), StatusCode::kInvalidArgument);
  o = Small();
  o.concurrency = {0};
  EXPECT_EQ(RunStorageProbe(o).status().code(), StatusCode::kInvalidArgument);
  o = Small();
  o.path = dir_ + "/does/not/exist";
  EXPECT_FALSE(RunStorageProbe(o).ok());
}

TEST(ProbeSizes, ParseAndFormat) {
  EXPECT_EQ(*ParseByteSize("4k"), 4096u);
  EXPECT_EQ(*ParseByteSize("64KiB"), 65536u);
  EXPECT_EQ(*ParseByteSize("16m"), 16u << 20);
  EXPECT_EQ(*ParseByteSize("1g"), 1u << 30);
  EXPECT_EQ(*ParseByteSize("1234"), 1234u);
  EXPECT_FALSE(ParseByteSize("abc").ok());
  EXPECT_FALSE(ParseByteSize("5x").ok());
  EXPECT_EQ(FormatBlock(4096), "4 KiB");
  EXPECT_EQ(FormatBlock(16 << 20), "16 MiB");
}

ProbeResult Synthetic() {
  ProbeResult r;
  r.file = "/x/stoker-probe.bin";
  r.cache_mode = "O_DIRECT";
  auto add = [&](const char* pat, size_t block, int threads, double mb_s) {
    ProbePoint p;
    p.pattern = pat;
    p.block = block;
    p.threads = threads;
    p.mb_s = mb_s;
    p.iops = mb_s * 1e6 / block;
    r.points.push_back(p);
  };
  for (int t : {1, 4, 16, 64}) {
    add("rand", 4096, t, 10.0 * t);
    add("rand", 131072, t, 100.0 * t);
    add("seq", 1 << 20, t, 900.0 + t);
  }
  return r;
}

TEST(ProbeAdvice, PicksFewestReadersAtTheNearestBlock) {
  ProbeResult r = Synthetic();
  // 3000 samples/s x 128 KiB = 393 MB/s: 128 KiB random reads reach it with 4 readers (400).
  FeedAdvice a = AdviseFeed(r, 3000, 128);
  EXPECT_NEAR(a.need_mb_s, 393.2, 0.1);
  EXPECT_EQ(a.random_block, 131072u);
  EXPECT_TRUE(a.random_ok);
  EXPECT_EQ(a.random_readers, 4);
  EXPECT_TRUE(a.sequential_ok);
  EXPECT_EQ(a.sequential_readers, 1);
  EXPECT_NE(a.text.find("can feed"), std::string::npos) << a.text;
}

TEST(ProbeAdvice, SaysWhenOnlySequentialOrNothingFeedsTheJob) {
  ProbeResult r = Synthetic();
  FeedAdvice a = AdviseFeed(r, 200000, 4);  // 819 MB/s of 4 KiB reads: random tops at 640
  EXPECT_EQ(a.random_block, 4096u);
  EXPECT_FALSE(a.random_ok);
  EXPECT_EQ(a.random_readers, 64);
  EXPECT_TRUE(a.sequential_ok);
  EXPECT_NE(a.text.find("sharded format"), std::string::npos) << a.text;
  FeedAdvice b = AdviseFeed(r, 100000, 128);  // 13 GB/s
  EXPECT_FALSE(b.random_ok);
  EXPECT_FALSE(b.sequential_ok);
  EXPECT_NE(b.text.find("cannot feed"), std::string::npos) << b.text;
}

TEST(ProbeReport, JsonHtmlAndTableCarryThePoints) {
  ProbeResult r = Synthetic();
  FeedAdvice a = AdviseFeed(r, 3000, 128);
  auto j = nlohmann::json::parse(ProbeJson(r, &a));
  EXPECT_EQ(j["points"].size(), r.points.size());
  EXPECT_EQ(j["cache_mode"], "O_DIRECT");
  EXPECT_EQ(j["feed"]["random_readers"], 4);
  std::string html = ProbeHtml(r, &a);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // self-contained, static
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  std::string table = ProbeTable(r);
  EXPECT_NE(table.find("O_DIRECT"), std::string::npos);
  EXPECT_NE(table.find("128 KiB"), std::string::npos);
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

// On an object store the advice sizes shards so that opening one (HEAD + first byte, about
// two request latencies) costs under 5 % of reading it at one request's rate. AWS-like
// numbers: 20 ms to first byte, 85 MB/s per request -> 20 x 40 ms x 85 MB/s = 68 MB -> 128 MiB.
TEST(ProbeAdvice, ObjectStoreShardSizeFromLatencyAndPerRequestRate) {
  ProbeResult r;
  r.object_store = true;
  r.ttfb_block = 64 << 10;
  r.ttfb_p50_us = 20000;
  ProbePoint seq;
  seq.pattern = "seq";
  seq.block = 16 << 20;
  seq.threads = 4;
  seq.mb_s = 340;
  ProbePoint rnd;
  rnd.pattern = "rand";
  rnd.block = 64 << 10;
  rnd.threads = 1;
  rnd.mb_s = 3;
  rnd.iops = 48;
  r.points = {seq, rnd};
  FeedAdvice a = AdviseFeed(r, 2000, 110);  // 225 MB/s
  EXPECT_TRUE(a.sequential_ok);
  EXPECT_FALSE(a.random_ok);
  EXPECT_EQ(a.min_shard_bytes, 128ull << 20);
  EXPECT_NE(a.text.find("requests in flight"), std::string::npos) << a.text;
  EXPECT_NE(a.text.find("Shards of at least 128 MiB"), std::string::npos) << a.text;
  EXPECT_NE(a.text.find("node cache"), std::string::npos) << a.text;
  // A local file system gets no shard-size line.
  r.object_store = false;
  EXPECT_EQ(AdviseFeed(r, 2000, 110).min_shard_bytes, 0u);
}

}  // namespace
}  // namespace stoker
