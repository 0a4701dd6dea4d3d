#include "pipeline/pipeline.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
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

// A consumer that keeps every batch (list(loader), gradient accumulation) gets them all:
// the pool goes past its budget with one warning naming the count instead of blocking.
TEST_F(RawFolder, HoldingEveryBatchNeverBlocksAndWarnsOnce) {
  auto o = Opts();
  o.threads = 2;
  o.prefetch = 2;  // pool budget: window 3 + 2 = 5 batches
  std::mutex mu;
  std::vector<std::string> logged;
  o.log = [&](const std::string& m) {
    std::lock_guard<std::mutex> lk(mu);
    logged.push_back(m);
  };
  auto p = Pipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (int epoch = 0; epoch < 2; ++epoch) {
    ASSERT_TRUE((*p)->StartEpoch(epoch).ok());
    std::vector<BatchPtr> held;
    for (;;) {
      auto b = (*p)->Next();
      if (!b.ok()) {
        ASSERT_TRUE(IsEndOfStream(b.status())) << b.status().ToString();
        break;
      }
      held.push_back(*b);
    }
    ASSERT_EQ(held.size(), 13u);
    std::set<std::string> keys;
    for (const auto& b : held) keys.insert(b->keys.begin(), b->keys.end());
    EXPECT_EQ(keys.size(), 102u);  // every held batch still has its own contents
  }
  PipelineStats st = (*p)->Stats();
  ASSERT_EQ(st.warnings.size(), 1u);
  EXPECT_NE(st.warnings[0].find("pool of 5"), std::string::npos) << st.warnings[0];
  EXPECT_NE(st.warnings[0].find("6 batch buffers"), std::string::npos) << st.warnings[0];
  std::lock_guard<std::mutex> lk(mu);
  EXPECT_EQ(logged, st.warnings);
}

// The stall watchdog, on a fake clock: one read hangs (a stuck mount); the error names the
// stage, the sample, the file, and how long.
TEST_F(RawFolder, StallWatchdogNamesTheStuckRead) {
  FaultInjectionEnv env;
  env.AddRule({.path_contains = "class0/f0.jpg", .block = true});
  FakeClock clock;
  auto o = Opts();
  o.shuffle = false;  // class0/f0 is the first sample: batch 0 cannot complete
  o.threads = 1;      // one worker, stuck on it
  o.dataset.env = &env;
  o.clock = &clock;
  o.stall_timeout_s = 300;
  auto p = Pipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE((*p)->StartEpoch(0).ok());
  ASSERT_TRUE(env.WaitUntilBlocked(1));
  clock.AdvanceMillis(301'000);
  auto b = (*p)->Next();
  ASSERT_FALSE(b.ok());
  const std::string m = b.status().message();
  EXPECT_EQ(b.status().code(), StatusCode::kDeadlineExceeded) << m;
  EXPECT_NE(m.find("no batch for 301.0 s (stall timeout 300 s)"), std::string::npos) << m;
  EXPECT_NE(m.find("stk-read-0: read of sample 'class0/f0'"), std::string::npos) << m;
  EXPECT_NE(m.find("class0/f0.jpg) for 301.0 s"), std::string::npos) << m;
  // It stays failed, and shutdown is prompt once the read returns.
  EXPECT_EQ((*p)->Next().status().code(), StatusCode::kDeadlineExceeded);
  env.ReleaseBlocked();
  p->reset();
}

TEST_F(RawFolder, StallWatchdogIsQuietBeforeTheTimeout) {
  FaultInjectionEnv env;
  env.AddRule({.path_contains = "class0/f0.jpg", .block = true});
  FakeClock clock;
  auto o = Opts();
  o.shuffle = false;
  o.threads = 1;
  o.dataset.env = &env;
  o.clock = &clock;
  o.stall_timeout_s = 300;
  o.on_stall = StallAction::kWarn;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> logged;
  o.log = [&](const std::string& m) {
    std::lock_guard<std::mutex> lk(mu);
    logged.push_back(m);
    cv.notify_all();
  };
  auto p = Pipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE((*p)->StartEpoch(0).ok());
  ASSERT_TRUE(env.WaitUntilBlocked(1));
  clock.AdvanceMillis(250'000);  // under the timeout: Next() keeps waiting, says nothing
  Result<BatchPtr> got = Cancelled("not run");
  std::thread consumer([&] { got = (*p)->Next(); });
  clock.AdvanceMillis(60'000);  // now 310 s: warn mode reports and keeps waiting
  {
    std::unique_lock<std::mutex> lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return !logged.empty(); }));
  }
  env.ReleaseBlocked();  // the mount comes back: the batch arrives
  consumer.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)->size, 8);
  std::lock_guard<std::mutex> lk(mu);
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("stalled: no batch for"), std::string::npos) << logged[0];
  EXPECT_NE(logged[0].find("read of sample 'class0/f0'"), std::string::npos) << logged[0];
  EXPECT_EQ((*p)->Stats().warnings, logged);
  // The rest of the epoch is unaffected.
  int batches = 1;
  while ((*p)->Next().ok()) ++batches;
  EXPECT_EQ(batches, 13);
}

// A read that never returns (a hung mount) must not hang Stop() or the destructor: the
// blocked worker is detached after a second, the pipeline names it and refuses a new epoch,
// and the worker exits cleanly once the read returns.
TEST_F(RawFolder, StopIsPromptWithAReadBlockedForever) {
  // The Env must outlive the detached read (the documented contract): one that lives as
  // long as the process, as Env::Default() does. (On the stack, the worker's last counter
  // update after the read returned raced with the next test reusing that stack: TSan.)
  static FaultInjectionEnv* const env_forever = new FaultInjectionEnv;
  FaultInjectionEnv& env = *env_forever;
  env.AddRule({.path_contains = "class0/f0.jpg", .block = true});
  auto o = Opts();
  o.shuffle = false;
  o.threads = 2;
  o.dataset.env = &env;
  auto p = Pipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE((*p)->StartEpoch(0).ok());
  ASSERT_TRUE(env.WaitUntilBlocked(1));
  auto t0 = std::chrono::steady_clock::now();
  (*p)->Stop();
  double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(stop_s, 30.0);  // the grace is 1 s; a join would wait forever
  PipelineStats st = (*p)->Stats();
  ASSERT_FALSE(st.warnings.empty());
  EXPECT_NE(st.warnings.back().find("read of sample 'class0/f0'"), std::string::npos)
      << st.warnings.back();
  Status again = (*p)->StartEpoch(1);
  EXPECT_EQ(again.code(), StatusCode::kCancelled);
  EXPECT_NE(again.message().find("create a new pipeline"), std::string::npos) << again.message();
  p->reset();  // the handle goes; the detached worker still holds the pipeline
  env.ReleaseBlocked();
  for (int i = 0; i < 600 && env.blocked() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(env.blocked(), 0);
}

// NextWithin: a bounded wait returns "timed out" with no batch, and the next call continues
// the same wait (counted once); then the batches arrive in order as from Next().
TEST_F(RawFolder, NextWithinTimesOutAndContinuesTheWait) {
  FaultInjectionEnv env;
  env.AddRule({.path_contains = "class0/f0.jpg", .block = true});
  auto o = Opts();
  o.shuffle = false;
  o.threads = 1;
  o.dataset.env = &env;
  auto p = Pipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE((*p)->StartEpoch(0).ok());
  ASSERT_TRUE(env.WaitUntilBlocked(1));
  for (int i = 0; i < 3; ++i) {
    bool timed_out = false;
    auto b = (*p)->NextWithin(20'000'000, &timed_out);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_TRUE(timed_out);
    EXPECT_EQ(*b, nullptr);
  }
  env.ReleaseBlocked();
  bool timed_out = true;
  Result<BatchPtr> b = BatchPtr();
  for (int i = 0; i < 6000 && timed_out; ++i) b = (*p)->NextWithin(10'000'000, &timed_out);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_NE(*b, nullptr);
  EXPECT_EQ((*b)->index, 0u);
  int batches = 1;
  while ((*p)->Next().ok()) ++batches;
  EXPECT_EQ(batches, 13);
  // One consumer call per batch delivered (plus the end), not one per timed-out wait.
  PipelineStats st = (*p)->Stats();
  EXPECT_EQ(st.batches, 13u);
}

// Elastic resume through the pipeline: W ranks take k batches each; W' ranks resume from
// the global position every rank computed. Keys checked as a multiset.
struct ElasticCase {
  int w, w2, k, batch, batch2;
};

TEST_F(RawFolder, ElasticResumeLosesAndRepeatsNothingAcrossWorldSizes) {
  // 102 samples. 8 -> 4 (batch 2 -> 2), 4 -> 6 (batch 3 -> 2), 2 -> 1 (batch 4 -> 8),
  // 3 -> 2 with drop balance checked for the tail rule below.
  for (ElasticCase c : {ElasticCase{8, 4, 3, 2, 2}, ElasticCase{4, 6, 2, 3, 2},
                        ElasticCase{2, 1, 5, 4, 8}, ElasticCase{1, 3, 4, 8, 4}}) {
    for (RankBalance bal : {RankBalance::kPad, RankBalance::kDrop}) {
      std::multiset<std::string> all;
      uint64_t consumed = 0;
      for (int r = 0; r < c.w; ++r) {
        auto o = Opts();
        o.rank = r;
        o.world_size = c.w;
        o.batch_size = c.batch;
        o.balance = bal;
        o.threads = 1 + r % 3;  // thread counts differ too
        auto p = Pipeline::Create(o);
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        Run head = Collect(**p, 2, 0, c.k);
        ASSERT_EQ(head.batch_sizes.size(), static_cast<size_t>(c.k));
        all.insert(head.keys.begin(), head.keys.end());
        uint64_t mine = (*p)->ConsumedAfter(c.k);
        if (r > 0) {
          ASSERT_EQ(mine, consumed);
        }
        consumed = mine;
      }
      EXPECT_EQ(consumed, static_cast<uint64_t>(c.w * c.k * c.batch));
      std::vector<size_t> batches;
      uint64_t per2 = 0;
      for (int r = 0; r < c.w2; ++r) {
        auto o = Opts();
        o.rank = r;
        o.world_size = c.w2;
        o.batch_size = c.batch2;
        o.balance = bal;
        o.threads = 0;
        auto p = Pipeline::Create(o);
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        ASSERT_TRUE((*p)->ResumeEpoch(2, consumed).ok());
        Run tail;
        for (;;) {
          auto b = (*p)->Next();
          if (!b.ok()) {
            ASSERT_TRUE(IsEndOfStream(b.status())) << b.status().ToString();
            break;
          }
          tail.batch_sizes.push_back((*b)->size);
          all.insert((*b)->keys.begin(), (*b)->keys.end());
          per2 += (*b)->size;
        }
        EXPECT_EQ(tail.batch_sizes.size(), (*p)->pass_batches());
        batches.push_back(tail.batch_sizes.size());
      }
      for (size_t n : batches) EXPECT_EQ(n, batches[0]) << "equal batches per rank";
      // Every sample of the epoch once; the tail: pad repeats, drop leaves out, fewer than W'.
      std::set<std::string> uniq(all.begin(), all.end());
      uint64_t left = 102 - consumed;
      std::string what = std::to_string(c.w) + " -> " + std::to_string(c.w2) +
                         (bal == RankBalance::kPad ? " pad" : " drop");
      if (bal == RankBalance::kPad) {
        EXPECT_EQ(uniq.size(), 102u) << what;
        EXPECT_EQ(all.size() - uniq.size(), (c.w2 - left % c.w2) % c.w2) << what;
      } else {
        EXPECT_EQ(uniq.size(), all.size()) << what;
        EXPECT_EQ(102u - all.size(), left % c.w2) << what;
      }
    }
  }
}

TEST_F(RawFolder, ResumeEpochAtTheSameWorldSizeIsStartEpoch) {
  auto o = Opts();
  o.rank = 1;
  o.world_size = 2;
  auto p = Pipeline::Create(o);
  Run full = Collect(**p, 1);
  auto q = Pipeline::Create(o);
  Run head = Collect(**q, 1, 0, 2);
  uint64_t consumed = (*q)->ConsumedAfter(2);
  EXPECT_EQ(consumed, 2u * 8 * 2);
  ASSERT_TRUE((*q)->ResumeEpoch(1, consumed).ok());
  std::vector<std::string> keys = head.keys;
  for (;;) {
    auto b = (*q)->Next();
    if (!b.ok()) break;
    EXPECT_EQ((*b)->index, keys.size() / 8);  // batch numbers continue
    keys.insert(keys.end(), (*b)->keys.begin(), (*b)->keys.end());
  }
  EXPECT_EQ(keys, full.keys);
  EXPECT_EQ((*q)->ConsumedAfter((*q)->pass_batches()), 102u);  // the epoch is over
  EXPECT_FALSE((*q)->ResumeEpoch(1, 103).ok());
  EXPECT_NE((*q)->Fingerprint(), "");
  EXPECT_EQ((*q)->Fingerprint(), (*p)->Fingerprint());
}

}  // namespace
}  // namespace stoker

