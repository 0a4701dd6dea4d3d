#include "pipeline/autotune.h"

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

}  // namespace
}  // namespace stoker
