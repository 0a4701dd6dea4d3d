#include "doctor/watch_rules.h"

#include <gtest/gtest.h>

namespace stoker::doctor {
namespace {

// One rank, `n` steps of `wait` + `rest` seconds.
ProbeFacts Facts(double wait, double rest, int workers, int n = 20) {
  ProbeFacts p;
  ProbeRank r;
  for (int i = 0; i < n; ++i) r.steps.push_back({wait, wait + rest});
  r.wait_s = n * wait;
  r.step_s = n * (wait + rest);
  p.ranks.push_back(r);
  p.num_workers = workers;
  p.worker_pids = workers;
  p.settings_known = true;
  p.cpus = 4;
  p.machine_busy_cores = 2;
  return p;
}

std::string Cause(const ProbeFacts& p) { return InputCause(p, Thresholds{}); }

TEST(WatchRules, NoWorkersBusyMainWithFreeCoresIsTooFewWorkers) {
  ProbeFacts p = Facts(0.060, 0.004, 0);
  p.main_cores = p.main_demand = 1.0;
  p.worker_cores = p.worker_demand = 0;
  p.tree_demand = 1.0;
  EXPECT_EQ(Cause(p), "input.too_few_workers");
  auto f = RuleTooFewWorkers(p, Thresholds{});
  ASSERT_TRUE(f);
  EXPECT_NE(f->fix.find("num_workers=4"), std::string::npos) << f->fix;  // capped at the cores
}

TEST(WatchRules, BusyWorkersOnEveryCoreAreCpuBound) {
  ProbeFacts p = Facts(0.030, 0.010, 4);
  p.main_cores = p.main_demand = 0.1;
  p.worker_cores = p.worker_demand = 3.9;
  p.tree_demand = 4.0;
  EXPECT_EQ(Cause(p), "input.workers_cpu_bound");
}

TEST(WatchRules, IdleWorkersInDiskWaitAreStorage) {
  ProbeFacts p = Facts(0.030, 0.010, 4);
  p.main_cores = p.main_demand = 0.1;
  p.worker_cores = p.worker_demand = 0.4;
  p.worker_disk_wait_frac = 0.5;
  p.tree_demand = 0.5;
  EXPECT_EQ(Cause(p), "input.storage");
}

TEST(WatchRules, IdleWorkersAndBusyMainIsTheMainProcess) {
  ProbeFacts p = Facts(0.030, 0.010, 4);
  p.main_cores = p.main_demand = 1.0;
  p.worker_cores = p.worker_demand = 0.2;
  p.tree_demand = 1.2;
  EXPECT_EQ(Cause(p), "input.main_process");
}

TEST(WatchRules, ContentionAndNothingElseIsSaid) {
  ProbeFacts p = Facts(0.030, 0.010, 1);
  p.main_cores = 0.1;
  p.main_demand = 0.7;
  p.worker_cores = 0.1;
  p.worker_demand = 0.3;
  p.tree_demand = 1.0;
  p.machine_busy_cores = 4;
  EXPECT_EQ(Cause(p), "input.cpu_contention");
  EXPECT_TRUE(RuleCpuContention(p, Thresholds{}));
}

TEST(WatchRules, NoCpuMeasuredIsUnknownCause) {
  ProbeFacts p = Facts(0.030, 0.010, 2);
  EXPECT_EQ(Cause(p), "input.cause_unknown");
}

TEST(WatchRules, NotWaitingHasNoCause) {
  ProbeFacts p = Facts(0.0005, 0.050, 2);
  p.main_cores = p.main_demand = 1.0;
  EXPECT_EQ(Cause(p), "");
}

TEST(WatchRules, SlowRankIsTheStragglerAndTheVerdict) {
  ProbeFacts p = Facts(0.002, 0.050, 0);
  ProbeFacts slow = Facts(0.040, 0.012, 0);
  slow.ranks[0].rank = 1;
  p.ranks.push_back(slow.ranks[0]);
  auto f = RuleRankStraggler(p, Thresholds{});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank, 1);
  DoctorInputs in;
  auto r = DiagnoseWatch(in, p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->primary, Verdict::kImbalance);
  EXPECT_EQ(StatusLine(*r), "imbalance (rank 1)");
  EXPECT_EQ(r->ranks.size(), 2u);
}

TEST(WatchRules, NoEvidenceIsUnknownNeverHealthy) {
  DoctorInputs in;
  ProbeFacts p;
  auto r = DiagnoseWatch(in, p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->primary, Verdict::kUnknown);
  EXPECT_NE(r->summary.find("Record next"), std::string::npos);
}

TEST(WatchRules, ProbeStepsGiveTheVerdictAndCause) {
  ProbeFacts p = Facts(0.060, 0.004, 0);
  p.main_cores = p.main_demand = 1.0;
  p.tree_demand = 1.0;
  DoctorInputs in;
  auto r = DiagnoseWatch(in, p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->primary, Verdict::kInputBound);
  EXPECT_NE(r->summary.find("Cause: too few workers"), std::string::npos) << r->summary;
  EXPECT_EQ(StatusLine(*r), "input_bound (too few workers)");
}

}  // namespace
}  // namespace stoker::doctor
