#include "pipeline/pipeline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "io/fault_env.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

// A folder dataset of small files with distinct content; kRaw mode needs no decoder.
class RawFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("stoker_pipe_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    for (int c = 0; c < 3; ++c) {
      fs::create_directories(dir_ / ("class" + std::to_string(c)));
      for (int i = 0; i < 33 + c; ++i) {
        std::ofstream f(dir_ / ("class" + std::to_string(c)) / ("f" + std::to_string(i) + ".jpg"));
        f << "sample-" << c << "-" << i;
      }
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  PipelineOptions Opts() {
    PipelineOptions o;
    o.data = dir_.string();
    o.mode = DecodeMode::kRaw;
    o.batch_size = 8;
    o.seed = 42;
    o.rank = 0;
    o.world_size = 1;
    return o;
  }

  struct Run {
    std::vector<std::string> keys;
    std::vector<std::string> payloads;
    std::vector<int64_t> labels;
    std::vector<int> batch_sizes;
    Status error;
  };
  static Run Collect(Pipeline& p, int epoch = 0, uint64_t start = 0, int max_batches = -1) {
    Run r;
    EXPECT_TRUE(p.StartEpoch(epoch, start).ok());
    for (int n = 0; max_batches < 0 || n < max_batches; ++n) {
      auto b = p.Next();
      if (!b.ok()) {
        if (!IsEndOfStream(b.status())) r.error = b.status();
        break;
      }
      const Batch& bt = **b;
      r.batch_sizes.push_back(bt.size);
      for (int i = 0; i < bt.size; ++i) {
        r.keys.push_back(bt.keys[i]);
        r.labels.push_back(bt.labels[i]);
        r.payloads.emplace_back(bt.raw.begin() + bt.raw_offsets[i],
                                bt.raw.begin() + bt.raw_offsets[i + 1]);
      }
    }
    return r;
  }

  fs::path dir_;
};

TEST_F(RawFolder, DeliversEverySampleOnceWithLabelsAndBytes) {
  auto p = Pipeline::Create(Opts());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->samples_per_epoch(), 102u);
  EXPECT_EQ((*p)->batches_per_epoch(), 13u);
  Run r = Collect(**p);
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  ASSERT_EQ(r.keys.size(), 102u);
  std::set<std::string> uniq(r.keys.begin(), r.keys.end());
  EXPECT_EQ(uniq.size(), 102u);
  for (size_t i = 0; i < r.keys.size(); ++i) {
    // key "classC/fI" ↔ payload "sample-C-I", label C (sorted class dirs).
    const std::string& k = r.keys[i];
    int c = k[5] - '0';
    std::string idx = k.substr(k.find("/f") + 2);
    EXPECT_EQ(r.payloads[i], "sample-" + std::to_string(c) + "-" + idx);
    EXPECT_EQ(r.labels[i], c);
  }
  EXPECT_EQ(r.batch_sizes.back(), 102 % 8);
}

TEST_F(RawFolder, SameSeedSameOrderForAnyThreadCount) {
  std::vector<std::string> ref;
  for (int threads : {1, 2, 5, 0}) {
    for (bool fused : {false, true}) {
      auto o = Opts();
      o.threads = threads;
      o.fused = fused;
      auto p = Pipeline::Create(o);
      ASSERT_TRUE(p.ok());
      Run r = Collect(**p, 1);
      ASSERT_TRUE(r.error.ok());
      if (ref.empty()) ref = r.keys;
      EXPECT_EQ(r.keys, ref) << "threads " << threads << " fused " << fused;
    }
  }
  auto o = Opts();
  auto p = Pipeline::Create(o);
  Run other_epoch = Collect(**p, 2);
  EXPECT_NE(other_epoch.keys, ref);
}

TEST_F(RawFolder, RanksAreDisjointEqualAndCover) {
  for (int world : {1, 2, 3}) {
    std::multiset<std::string> all;
    std::vector<size_t> batches;
    for (int rank = 0; rank < world; ++rank) {
      auto o = Opts();
      o.rank = rank;
      o.world_size = world;
      o.balance = RankBalance::kDrop;
      auto p = Pipeline::Create(o);
      ASSERT_TRUE(p.ok());
      Run r = Collect(**p, 0);
      batches.push_back(r.batch_sizes.size());
      all.insert(r.keys.begin(), r.keys.end());
    }
    std::set<std::string> uniq(all.begin(), all.end());
    EXPECT_EQ(uniq.size(), all.size()) << "world " << world;
    EXPECT_EQ(all.size(), 102u - 102u % world);
    for (size_t b : batches) EXPECT_EQ(b, batches[0]) << "world " << world;
  }
}

TEST_F(RawFolder, ResumesMidEpochExactly) {
  auto p = Pipeline::Create(Opts());
  Run full = Collect(**p, 3);
  auto q = Pipeline::Create(Opts());
  Run head = Collect(**q, 3, 0, 5);
  Run tail = Collect(**q, 3, 5);
  std::vector<std::string> joined = head.keys;
  joined.insert(joined.end(), tail.keys.begin(), tail.keys.end());
  EXPECT_EQ(joined, full.keys);
}

TEST_F(RawFolder, FailPolicyNamesTheFileAfterEarlierBatches) {
  FaultInjectionEnv env;
  env.AddRule({.path_contains = "class1/f7.jpg", .fail_read = true});
  auto o = Opts();
  o.shuffle = false;
  o.dataset.env = &env;
  auto p = Pipeline::Create(o);
  ASSERT_TRUE(p.ok());
  Run r = Collect(**p);
  ASSERT_FALSE(r.error.ok());
  EXPECT_NE(r.error.message().find("class1/f7.jpg"), std::string::npos) << r.error.message();
  EXPECT_NE(r.error.message().find("injected EIO"), std::string::npos);
  // Sorted order: class0 (33 files) then class1; f7 sorts after f0..f6, f10..f19 etc.
  // Every batch before the failing one was delivered complete.
  for (int s : r.batch_sizes) EXPECT_EQ(s, 8);
  EXPECT_GT(r.keys.size(), 32u);
}

TEST_F(RawFolder, SkipPolicyCountsAndReportsAndLosesNothingElse) {
  FaultInjectionEnv env;
  env.AddRule({.path_contains = "class2/f3.jpg", .fail_read = true});
  env.AddRule({.path_contains = "class0/f11.jpg", .fail_open = true});
  auto o = Opts();
  o.on_error = ErrorPolicy::kSkip;
  o.dataset.env = &env;
  o.threads = 3;
  auto p = Pipeline::Create(o);
  Run r = Collect(**p);
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  EXPECT_EQ(r.keys.size(), 100u);
  std::set<std::string> uniq(r.keys.begin(), r.keys.end());
  EXPECT_EQ(uniq.size(), 100u);
  EXPECT_EQ(uniq.count("class2/f3"), 0u);
  EXPECT_EQ(uniq.count("class0/f11"), 0u);
  PipelineStats st = (*p)->Stats();
  EXPECT_EQ(st.skipped, 2u);
  ASSERT_EQ(st.skipped_items.size(), 2u);
  std::string all = st.skipped_items[0] + st.skipped_items[1];
  EXPECT_NE(all.find("class2/f3"), std::string::npos);
  EXPECT_NE(all.find("class0/f11"), std::string::npos);
  EXPECT_EQ((*p)->batches_per_epoch(), r.batch_sizes.size());
}

TEST_F(RawFolder, EarlyStopAndDestructionJoinCleanly) {
  FaultInjectionEnv env;
  env.AddRule({.path_contains = "class", .read_latency_us = 200});
  auto o = Opts();
  o.dataset.env = &env;
  o.threads = 4;
  for (int i = 0; i < 3; ++i) {
    auto p = Pipeline::Create(o);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->StartEpoch(0).ok());
    auto b = (*p)->Next();
    ASSERT_TRUE(b.ok());
    BatchPtr keep = *b;  // a batch may outlive the pipeline
    p->reset();
    EXPECT_EQ(keep->size, 8);
  }
  // Restarting an epoch while one is in flight.
  auto p = Pipeline::Create(o);
  ASSERT_TRUE((*p)->StartEpoch(0).ok());
  ASSERT_TRUE((*p)->Next().ok());
  Run r = Collect(**p, 0);
  EXPECT_EQ(r.keys.size(), 102u);
}

TEST_F(RawFolder, StatsCountStagesAndTheBottleneck) {
  FaultInjectionEnv env;
  env.AddRule({.path_contains = "class", .read_latency_us = 300});
  auto o = Opts();
  o.dataset.env = &env;
  o.threads = 2;
  auto p = Pipeline::Create(o);
  Run r = Collect(**p);
  PipelineStats st = (*p)->Stats();
  EXPECT_EQ(st.samples, 102u);
  ASSERT_EQ(st.stages.size(), 4u);
  EXPECT_EQ(st.stages[0].name, "read");
  EXPECT_EQ(st.stages[0].items, 102u);
  EXPECT_EQ(st.stages[2].items, 102u);
  EXPECT_EQ(st.stages[3].items, 13u);  // batches finalized
  EXPECT_EQ(st.bottleneck, "read");    // the slow storage
  EXPECT_GT(st.stages[0].busy_frac, 0.5);
}

TEST_F(RawFolder, BadOptionsAreClearErrors) {
  auto o = Opts();
  o.batch_size = 0;
  EXPECT_EQ(Pipeline::Create(o).status().code(), StatusCode::kInvalidArgument);
  o = Opts();
  o.data = (dir_ / "missing").string();
  auto r = Pipeline::Create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing"), std::string::npos);
  o = Opts();
  o.rank = 5;
  o.world_size = 2;
  EXPECT_FALSE(Pipeline::Create(o).ok());
}

TEST_F(RawFolder, FixedThreadCountMeansThatManyFusedWorkers) {
  for (int n : {1, 2, 5}) {
    auto o = Opts();
    o.threads = n;
    auto p = Pipeline::Create(o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    Run r = Collect(**p);
    ASSERT_TRUE(r.error.ok()) << r.error.ToString();
    PipelineStats st = (*p)->Stats();
    EXPECT_EQ(st.threads, n);
    EXPECT_FALSE(st.autotune && o.prefetch > 0);
    // Every stage runs on the same n workers; their fractions share those workers' time.
    double busy = 0;
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(st.stages[s].threads, n) << st.stages[s].name;
      busy += st.stages[s].busy_frac;
    }
    EXPECT_LE(busy + st.stages[0].wait_input_frac + st.stages[0].wait_output_frac, 1.0 + 1e-9);
  }
}

TEST_F(RawFolder, AutoRunsReadThreadsInFrontOfComputeThreads) {
  auto o = Opts();
  o.threads = 0;
  o.cpu_budget = 3;
  auto p = Pipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Run r = Collect(**p);
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  PipelineStats st = (*p)->Stats();
  EXPECT_TRUE(st.autotune);
  // decode and augment share the compute threads (at most one per core of the budget).
  EXPECT_EQ(st.stages[1].threads, st.stages[2].threads);
  EXPECT_GE(st.stages[1].threads, 1);
  EXPECT_LE(st.stages[1].threads, 3);
  EXPECT_EQ(st.threads, st.stages[0].threads + st.stages[1].threads);
  double compute = st.stages[1].busy_frac + st.stages[2].busy_frac + st.stages[1].wait_input_frac +
                   st.stages[1].wait_output_frac;
  EXPECT_NEAR(compute, 1.0, 1e-6);
}

}  // namespace
}  // namespace stoker
