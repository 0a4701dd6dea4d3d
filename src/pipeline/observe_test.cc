#include "pipeline/observe.h"

#include <cstdint>
#include <gtest/gtest.h>

namespace stoker {
namespace {

void Set(StageCounters* c, uint64_t items, double busy_s, double cpu_s, double win_s,
         double wout_s) {
  c->items = items;
  c->busy_ns = static_cast<int64_t>(busy_s * 1e9);
  c->cpu_ns = static_cast<int64_t>(cpu_s * 1e9);
  c->wait_in_ns = static_cast<int64_t>(win_s * 1e9);
  c->wait_out_ns = static_cast<int64_t>(wout_s * 1e9);
}

TEST(SummarizeStages, SplitTopologyFractionsAreOfEachGroupsThreadTime) {
  StageCounters sc[kNumStages];
  Set(&sc[kRead], 100, 1.0, 0.2, 0.0, 3.0);     // read group: busy 1 of 4 s
  Set(&sc[kDecode], 100, 3.0, 3.0, 0.5, 0.0);   // compute group: 3 + 1 busy of 4.5 s
  Set(&sc[kAugment], 100, 1.0, 1.0, 0.0, 0.0);
  ConsumerCounters consumer;
  consumer.wait_ns = 2'000'000'000;
  consumer.busy_ns = 2'000'000'000;
  PipelineStats st;
  SummarizeStages(sc, {false, 3, 2}, 10.0, consumer, &st);
  ASSERT_EQ(st.stages.size(), 4u);
  EXPECT_NEAR(st.stages[kRead].busy_frac, 0.25, 1e-9);
  EXPECT_NEAR(st.stages[kRead].wait_output_frac, 0.75, 1e-9);
  EXPECT_NEAR(st.stages[kDecode].busy_frac, 3.0 / 4.5, 1e-9);
  EXPECT_NEAR(st.stages[kAugment].busy_frac, 1.0 / 4.5, 1e-9);
  EXPECT_EQ(st.stages[kRead].threads, 3);
  EXPECT_EQ(st.stages[kDecode].threads, 2);
  EXPECT_EQ(st.bottleneck, "decode");  // busiest member of the busiest group
  EXPECT_EQ(st.threads, 5);
  EXPECT_NEAR(st.consumer_wait_frac, 0.5, 1e-9);
}

TEST(SummarizeStages, FusedTopologySharesOneGroupAndCountsOnlyItsThreads) {
  StageCounters sc[kNumStages];
  Set(&sc[kRead], 10, 2.0, 0.1, 0.0, 0.0);
  Set(&sc[kDecode], 10, 1.0, 1.0, 0.0, 0.0);
  Set(&sc[kAugment], 10, 1.0, 1.0, 0.0, 0.0);
  ConsumerCounters consumer;
  PipelineStats st;
  SummarizeStages(sc, {true, 2, 7}, 4.0, consumer, &st);
  EXPECT_NEAR(st.stages[kRead].busy_frac, 0.5, 1e-9);
  EXPECT_NEAR(st.stages[kDecode].busy_frac, 0.25, 1e-9);
  EXPECT_EQ(st.bottleneck, "read");
  EXPECT_EQ(st.threads, 2);  // compute threads are not counted while fused
}

TEST(SummarizeStages, ConsumerIsTheBottleneckWhenItHardlyWaitsAndStagesIdle) {
  StageCounters sc[kNumStages];
  Set(&sc[kRead], 10, 0.5, 0.1, 0.0, 2.0);
  Set(&sc[kDecode], 10, 0.5, 0.5, 0.0, 2.0);
  ConsumerCounters consumer;
  consumer.wait_ns = 10'000'000;     // 0.01 s
  consumer.busy_ns = 9'990'000'000;  // 9.99 s
  PipelineStats st;
  SummarizeStages(sc, {false, 1, 1}, 10.0, consumer, &st);
  EXPECT_EQ(st.bottleneck, "consumer");
}

TEST(TunerSampler, TakeReturnsDeltasSinceThePreviousTake) {
  StageCounters sc[kNumStages];
  ConsumerCounters consumer;
  Set(&sc[kRead], 5, 1.0, 0.5, 0, 0);
  TunerSampler sampler(sc, consumer, 1'000'000'000);
  Set(&sc[kRead], 15, 2.0, 0.75, 0, 0);
  Set(&sc[kDecode], 8, 0.5, 0.5, 0, 0);
  Set(&sc[kAugment], 8, 0.25, 0.25, 0, 0);
  consumer.calls = 4;
  consumer.starved = 1;
  consumer.busy_ns = 300'000'000;
  AutotuneSnapshot a = sampler.Take(1'100'000'000, 2, 64);
  EXPECT_NEAR(a.period_s, 0.1, 1e-9);
  EXPECT_EQ(a.cpu_budget, 2);
  EXPECT_EQ(a.batch_size, 64);
  ASSERT_EQ(a.stages.size(), 2u);
  EXPECT_TRUE(a.stages[0].io_stage);
  EXPECT_EQ(a.stages[0].items, 10u);
  EXPECT_NEAR(a.stages[0].wall_s, 1.0, 1e-9);
  EXPECT_NEAR(a.stages[0].cpu_s, 0.25, 1e-9);
  EXPECT_EQ(a.stages[1].items, 8u);  // decode items; decode + augment time
  EXPECT_NEAR(a.stages[1].cpu_s, 0.75, 1e-9);
  EXPECT_EQ(a.consumer_calls, 4u);
  EXPECT_EQ(a.consumer_starved_calls, 1u);
  EXPECT_NEAR(a.consumer_busy_s, 0.3, 1e-9);
  AutotuneSnapshot b = sampler.Take(1'300'000'000, 2, 64);  // nothing happened since
  EXPECT_NEAR(b.period_s, 0.2, 1e-9);
  EXPECT_EQ(b.stages[0].items, 0u);
  EXPECT_EQ(b.consumer_calls, 0u);
  EXPECT_EQ(sampler.last_ns(), 1'300'000'000);
}

}  // namespace
}  // namespace stoker
