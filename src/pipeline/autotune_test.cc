#include "pipeline/autotune.h"

#include <cstdint>
#include <gtest/gtest.h>

namespace stoker {
namespace {

std::vector<TunableInt> AutoThreads(int max) {
  std::vector<TunableInt> t(3);
  for (auto& x : t) {
    x.autotune = true;
    x.min = 1;
    x.max = max;
    x.value = 1;
  }
  return t;
}

AutotuneSnapshot Snap(double read_ms, double read_wall_ms, double decode_ms, double aug_ms,
                      int budget, uint64_t items = 100) {
  AutotuneSnapshot s;
  s.cpu_budget = budget;
  s.period_s = 0.1;
  s.stages = {{"read", true, items, read_ms * 1e-3 * items, read_wall_ms * 1e-3 * items},
              {"decode", false, items, decode_ms * 1e-3 * items, decode_ms * 1e-3 * items},
              {"augment", false, items, aug_ms * 1e-3 * items, aug_ms * 1e-3 * items}};
  return s;
}

TEST(Autotuner, GivesThreadsToTheSlowestStage) {
  TunableInt pf{1, 8, 2, true};
  Autotuner t(AutoThreads(8), pf);
  std::vector<std::string> why;
  // decode 1 ms, augment 0.4 ms, read 0.05 ms; 2 cores → capacity 2/1.45ms ≈ 1379/s
  EXPECT_TRUE(t.Step(Snap(0.05, 0.05, 1.0, 0.4, 2), &why));
  EXPECT_EQ(t.threads(1), 2);  // decode needs 1.38
  EXPECT_EQ(t.threads(2), 1);  // augment needs 0.55
  EXPECT_EQ(t.threads(0), 1);
  EXPECT_NEAR(t.capacity(), 2 / 1.45e-3, 1);
  ASSERT_FALSE(why.empty());
  EXPECT_NE(why[0].find("decode threads 1 -> 2"), std::string::npos);
  // Same observations again: nothing moves.
  why.clear();
  EXPECT_FALSE(t.Step(Snap(0.05, 0.05, 1.0, 0.4, 2), &why));
  EXPECT_TRUE(why.empty());
}

TEST(Autotuner, MovesThreadsWhenTheBottleneckMoves) {
  TunableInt pf{1, 8, 2, true};
  Autotuner t(AutoThreads(16), pf);
  t.Step(Snap(0.05, 0.05, 2.0, 0.2, 8), nullptr);
  int decode_before = t.threads(1), aug_before = t.threads(2);
  EXPECT_GT(decode_before, aug_before);
  // Augment becomes expensive (e.g. larger output): threads move to it over a few periods.
  for (int i = 0; i < 6; ++i) t.Step(Snap(0.05, 0.05, 0.2, 2.0, 8), nullptr);
  EXPECT_LT(t.threads(1), decode_before);
  EXPECT_GT(t.threads(2), aug_before);
  EXPECT_GT(t.threads(2), t.threads(1));
}

TEST(Autotuner, IoWaitAddsReadThreadsWithoutSpendingCpuBudget) {
  TunableInt pf{1, 8, 2, true};
  Autotuner t(AutoThreads(32), pf, 16);
  // Read costs 0.05 ms CPU but 5 ms wall (remote storage).
  t.Step(Snap(0.05, 5.0, 1.0, 0.4, 2), nullptr);
  EXPECT_GT(t.threads(0), 4);
  EXPECT_LE(t.threads(0), 16);
  EXPECT_EQ(t.threads(1), 2);  // CPU stages unchanged by the I/O wait
}

TEST(Autotuner, FixedKnobsStayFixed) {
  auto th = AutoThreads(8);
  th[1].autotune = false;
  th[1].value = 1;
  TunableInt pf{1, 8, 3, false};
  Autotuner t(th, pf);
  AutotuneSnapshot s = Snap(0.05, 0.05, 1.0, 0.4, 4);
  s.consumer_calls = 10;
  s.consumer_starved_calls = 10;
  s.consumer_busy_s = 1.0;
  t.Step(s, nullptr);
  EXPECT_EQ(t.threads(1), 1);
  EXPECT_EQ(t.prefetch(), 3);
}

TEST(Autotuner, PrefetchGrowsOnJitterNotOnThroughputLimit) {
  TunableInt pf{1, 16, 2, true};
  Autotuner t(AutoThreads(8), pf);
  // Capacity ≈ 2/1.45ms ≈ 1379 samples/s. Consumer: 10 batches of 32 in 1 s of work →
  // demand 320/s, below capacity: its waits are jitter → grow.
  AutotuneSnapshot s = Snap(0.05, 0.05, 1.0, 0.4, 2);
  s.batch_size = 32;
  s.consumer_calls = 10;
  s.consumer_starved_calls = 5;
  s.consumer_busy_s = 1.0;
  EXPECT_TRUE(t.Step(s, nullptr));
  EXPECT_EQ(t.prefetch(), 4);
  t.Step(s, nullptr);
  EXPECT_EQ(t.prefetch(), 8);
  t.Step(s, nullptr);
  t.Step(s, nullptr);
  EXPECT_EQ(t.prefetch(), 16);  // capped by the memory budget
  // A consumer that wants more than the CPU can make: prefetch would not help.
  Autotuner t2(AutoThreads(8), TunableInt{1, 16, 2, true});
  s.consumer_busy_s = 0.01;  // demand 32000/s
  t2.Step(s, nullptr);
  EXPECT_EQ(t2.prefetch(), 2);
  // No waits: no growth.
  Autotuner t3(AutoThreads(8), TunableInt{1, 16, 2, true});
  s.consumer_busy_s = 1.0;
  s.consumer_starved_calls = 0;
  t3.Step(s, nullptr);
  EXPECT_EQ(t3.prefetch(), 2);
}

// Topology: scripted epoch observations in, the next epoch's topology out.
TopologyObservation Epoch(int epoch, double read_ms, double compute_ms, bool fused,
                          int read_threads, int compute_threads, uint64_t items = 100) {
  TopologyObservation o;
  o.epoch = epoch;
  o.read_items = o.compute_items = items;
  o.read_wall_s = read_ms * 1e-3 * items;
  o.compute_cpu_s = compute_ms * 1e-3 * items;
  o.fused = fused;
  o.read_threads = read_threads;
  o.compute_threads = compute_threads;
  return o;
}

std::vector<TunableInt> ReadCompute(int read, int compute) {
  std::vector<TunableInt> t(2);
  t[0] = {1, 16, read, true};
  t[1] = {1, 4, compute, true};
  return t;
}

TEST(AutotunerTopology, CheapReadsGoFusedWithOneWorkerPerComputeThread) {
  Autotuner t(ReadCompute(3, 2), TunableInt{1, 8, 2, true});
  // read 0.04 ms vs compute 2 ms: 2 % < 10 %.
  TopologyDecision d = t.ChooseTopology(Epoch(1, 0.04, 2.0, false, 3, 2));
  EXPECT_TRUE(d.changed);
  EXPECT_TRUE(d.fused);
  EXPECT_EQ(d.read_threads, 2);  // fused workers = the compute threads
  EXPECT_EQ(d.compute_threads, 2);
  EXPECT_NE(d.reason.find("epoch 1: a read took 0.040 ms, 2% of a sample's compute: 2 fused workers"),
            std::string::npos)
      << d.reason;
}

TEST(AutotunerTopology, SlowReadsGoBackToTheTunedReadThreads) {
  Autotuner t(ReadCompute(5, 2), TunableInt{1, 8, 2, true});
  // Fused with 2 workers; reads now cost 0.5 ms of 2 ms (25 %).
  TopologyDecision d = t.ChooseTopology(Epoch(3, 0.5, 2.0, true, 2, 2));
  EXPECT_TRUE(d.changed);
  EXPECT_FALSE(d.fused);
  EXPECT_EQ(d.read_threads, 5);  // the read group's tuned count
  EXPECT_EQ(d.compute_threads, 2);
  EXPECT_NE(d.reason.find("read threads in front of compute threads again"), std::string::npos);
}

TEST(AutotunerTopology, KeepsTheTopologyAtTheBoundaryAndWithTooLittleSeen) {
  Autotuner t(ReadCompute(1, 2), TunableInt{1, 8, 2, true});
  // Exactly 10 %: not under a tenth, so read threads stay.
  EXPECT_FALSE(t.ChooseTopology(Epoch(1, 0.2, 2.0, false, 1, 2)).changed);
  // Already fused and reads still cheap: nothing to do.
  EXPECT_FALSE(t.ChooseTopology(Epoch(2, 0.01, 2.0, true, 2, 2)).changed);
  // 15 samples are too few to judge.
  TopologyDecision d = t.ChooseTopology(Epoch(1, 0.01, 2.0, false, 1, 2, 15));
  EXPECT_FALSE(d.changed);
  EXPECT_FALSE(d.fused);
  EXPECT_EQ(d.read_threads, 1);
  // No CPU measured (e.g. a clock without CPU time): no decision.
  EXPECT_FALSE(t.ChooseTopology(Epoch(1, 0.0, 0.0, false, 1, 2)).changed);
}

TEST(AutotunerTopology, ASequenceOfEpochsFollowsTheStorage) {
  Autotuner t(ReadCompute(4, 2), TunableInt{1, 8, 2, true});
  bool fused = false;
  int read = 4, compute = 2;
  std::vector<bool> seen;
  // cold (slow reads), warm, warm, storage slows down, warm again.
  for (double read_ms : {1.0, 0.02, 0.02, 0.8, 0.03}) {
    TopologyDecision d = t.ChooseTopology(Epoch(static_cast<int>(seen.size()) + 1, read_ms, 2.0,
                                                fused, read, compute));
    fused = d.fused;
    read = d.read_threads;
    compute = d.compute_threads;
    seen.push_back(fused);
  }
  EXPECT_EQ(seen, (std::vector<bool>{false, true, true, false, true}));
  EXPECT_EQ(compute, 2);
  EXPECT_EQ(read, 2);
}

}  // namespace
}  // namespace stoker

