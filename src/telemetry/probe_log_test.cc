#include "telemetry/probe_log.h"

#include <gtest/gtest.h>

#include "telemetry/sampler.h"

namespace stoker::telemetry {
namespace {

TEST(ProbeLog, AppliesEveryKind) {
  ProbeProcess p;
  ASSERT_TRUE(ApplyProbeLine(R"({"kind":"start","pid":7,"ppid":1,"rank":1,"world_size":2,)"
                             R"("python":"3.11.2","argv":["t.py"],"chained_sitecustomize":"/s.py"})",
                             &p).ok());
  ASSERT_TRUE(ApplyProbeLine(R"({"kind":"torch","version":"1.13"})", &p).ok());
  ASSERT_TRUE(ApplyProbeLine(R"({"kind":"loader","loader":0,"num_workers":2,"batch_size":8,)"
                             R"("pin_memory":true,"prefetch_factor":2,"persistent_workers":false})",
                             &p).ok());
  ASSERT_TRUE(ApplyProbeLine(R"({"kind":"workers","loader":0,"pids":[11,12,11,"x",-3]})", &p).ok());
  ASSERT_TRUE(ApplyProbeLine(R"({"kind":"steps","loader":0,"wait":[0.1,0.2,"bad"],"compute":[0.3,0.4,0.5]})",
                             &p).ok());
  ASSERT_TRUE(ApplyProbeLine(R"({"kind":"profiler","ok":false,"error":"busy"})", &p).ok());
  ASSERT_TRUE(ApplyProbeLine(R"({"kind":"profiler","ok":true,"trace":"/t.json"})", &p).ok());
  ASSERT_TRUE(ApplyProbeLine(R"({"kind":"exit","steps":3})", &p).ok());
  EXPECT_EQ(p.pid, 7);
  EXPECT_EQ(p.rank, 1);
  EXPECT_TRUE(p.torch && p.exited);
  EXPECT_EQ(p.chained_sitecustomize, "/s.py");
  ASSERT_EQ(p.loaders.size(), 1u);
  const ProbeLoader& l = p.loaders[0];
  EXPECT_EQ(l.num_workers, 2);
  EXPECT_TRUE(l.pin_memory);
  EXPECT_EQ(l.worker_pids, (std::vector<int>{11, 12}));  // duplicates and junk dropped
  ASSERT_EQ(l.wait_s.size(), 3u);  // a non-number counts as 0 s, the step is kept
  EXPECT_DOUBLE_EQ(l.wait_s[2], 0.0);
  EXPECT_EQ(p.traces, (std::vector<std::string>{"/t.json"}));
  EXPECT_EQ(p.profiler_errors, (std::vector<std::string>{"busy"}));
  EXPECT_EQ(p.main_loader(), &l);
  EXPECT_EQ(p.steps(), 3u);
}

TEST(ProbeLog, BadLinesAreErrorsNotCrashes) {
  ProbeProcess p;
  EXPECT_FALSE(ApplyProbeLine("not json", &p).ok());
  EXPECT_FALSE(ApplyProbeLine("[1,2]", &p).ok());
  EXPECT_FALSE(ApplyProbeLine(R"({"no":"kind"})", &p).ok());
  EXPECT_FALSE(ApplyProbeLine(R"({"kind":"steps","loader":99999})", &p).ok());
  EXPECT_TRUE(ApplyProbeLine(R"({"kind":"future-kind"})", &p).ok());
  EXPECT_TRUE(ApplyProbeLine(R"({"kind":"start","pid":"seven","rank":1e300})", &p).ok());
  EXPECT_EQ(p.rank, -1);
  EXPECT_EQ(p.main_loader(), nullptr);
}

TEST(ProcParse, StatStateFaultsAndSchedstat) {
  auto st = ParseProcStat("42 (a (b) c) R 1 42 42 0 -1 4194304 1500 0 7 0 250 30 0 0 20 0 1");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, 'R');
  EXPECT_EQ(st->minflt, 1500u);
  EXPECT_EQ(st->majflt, 7u);
  EXPECT_EQ(st->utime, 250u);
  EXPECT_EQ(st->stime, 30u);
  auto ss = ParseSchedstat("326759234 677254599 12\n");
  ASSERT_TRUE(ss.ok());
  EXPECT_EQ(ss->first, 326759234u);
  EXPECT_EQ(ss->second, 677254599u);
  EXPECT_FALSE(ParseSchedstat("x").ok());
  auto c = ParseCpuLines("cpu  10 0 10 70 10 0 0 0\ncpu0 5 0 5 40 0 0 0 0\ncpu1 5 0 5 30 10\nintr 5\n");
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].total, 100u);
  EXPECT_EQ(c[0].iowait, 10u);
  EXPECT_EQ(c[0].busy, 20u);
  EXPECT_EQ(c[2].busy, 10u);
}

}  // namespace
}  // namespace stoker::telemetry
