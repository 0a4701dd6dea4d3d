// The doctor on Ray Data stats: what the rules and the verdict make of variants of a
// recorded run (tests/traces/ray/) -- the golden cases cover the recorded files as they are.
#include <gtest/gtest.h>

#include "doctor/doctor.h"
#include "doctor/render.h"
#include "telemetry/ray_stats_testing.h"

namespace stoker::doctor {
namespace {

using ray_testing::Edit;
using ray_testing::Recorded;

Report DiagnoseText(const std::string& text) {
  auto st = telemetry::ParseRayDataStats(text, "ray.txt");
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  DoctorInputs in;
  in.ray_stats.push_back(std::move(*st));
  auto r = Diagnose(in);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return *r;
}

const Finding* Find(const Report& r, const std::string& id) {
  for (const auto& f : r.findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

TEST(DoctorRay, AWaitBetweenTheThresholdsIsAFindingNotTheVerdict) {
  // The consumer-bound run with the loop's own code cut to 9x the wait after the first
  // batch (0.8 ms): it waits 10% -- above input_warn, below input_verdict.
  std::string s = Edit(Recorded("ray-consumer-bound.txt"),
                       "Total execution time for user thread: 1.21s",
                       "Total execution time for user thread: 7.02ms");
  Report r = DiagnoseText(s);
  ASSERT_TRUE(r.ray);
  EXPECT_NEAR(r.ray->consumer_wait_frac, 0.78 / (0.78 + 7.02), 1e-9);
  EXPECT_EQ(r.primary, Verdict::kHealthy);
  const Finding* w = Find(r, "ray.consumer_wait");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->severity, "medium");
  ASSERT_TRUE(w->expected_speedup);
  EXPECT_NEAR(*w->expected_speedup, 7.8 / 7.02, 1e-6);
  EXPECT_EQ(Find(r, "ray.consumer_bound"), nullptr);
  EXPECT_EQ(Find(r, "ray.operator")->severity, "medium");
}

TEST(DoctorRay, TransferDominatedWaitPointsAtTheTransfer) {
  std::string s = Recorded("ray-input-bound.txt");
  s = Edit(s, "* production wait: 2.28s", "* production wait: 5.0ms");
  s = Edit(s, "* data transfer (ray.get): 7.42ms", "* data transfer (ray.get): 2.2s");
  Report r = DiagnoseText(s);
  const Finding* w = Find(r, "ray.consumer_wait");
  ASSERT_NE(w, nullptr);
  EXPECT_NE(w->fix.find("prefetch_batches"), std::string::npos) << w->fix;
  EXPECT_EQ(w->fix.find("MapBatches(slow_transform)"), std::string::npos) << w->fix;
}

TEST(DoctorRay, SpillIsAFinding) {
  std::string s = Recorded("ray-input-bound.txt") + "\nCluster memory:\n* Spilled to disk: 640MB\n";
  Report r = DiagnoseText(s);
  const Finding* f = Find(r, "ray.spill");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->evidence.find("640 MB"), std::string::npos);
  EXPECT_EQ(Find(DiagnoseText(Recorded("ray-input-bound.txt")), "ray.spill"), nullptr);
}

TEST(DoctorRay, CachedOperatorsOnlyIsNoCrashAndNoBottleneck) {
  Report r = DiagnoseText("Operator 1 ReadRange: [execution cached]\n");
  ASSERT_TRUE(r.ray);
  EXPECT_TRUE(r.ray->ops.empty());
  EXPECT_EQ(r.ray->bottleneck, -1);
  EXPECT_EQ(r.primary, Verdict::kUnknown);
  EXPECT_FALSE(RenderText(r).empty());
  EXPECT_FALSE(RenderHtml(r).empty());
}

TEST(DoctorRay, FewLongTasksAreNotTaskOverhead) {
  // Tiny-blocks run with each task made 10x longer: 27 ms per task is no longer "tiny".
  std::string s = Edit(Recorded("ray-tiny-blocks.txt"),
                       "* Remote wall time: 1.25ms min, 24.87ms max, 2.69ms mean, 1.08s total",
                       "* Remote wall time: 12.5ms min, 248.7ms max, 26.9ms mean, 10.8s total");
  Report r = DiagnoseText(s);
  EXPECT_EQ(Find(r, "ray.task_overhead"), nullptr);
  EXPECT_NE(Find(DiagnoseText(Recorded("ray-tiny-blocks.txt")), "ray.task_overhead"), nullptr);
}

}  // namespace
}  // namespace stoker::doctor
