// The Ray Data stats reader on the text Ray 2.60 printed in real runs
// (tests/traces/ray/, recorded by record.py there) and on malformed variants of it.
#include "telemetry/ray_stats.h"

#include <gtest/gtest.h>

#include "telemetry/inputs.h"
#include "telemetry/ray_stats_testing.h"

namespace stoker::telemetry {
namespace {

using ray_testing::Edit;
using ray_testing::Recorded;

TEST(RayStats, DurationsAsRayFormatsThem) {
  double v = 0;
  ASSERT_TRUE(ParseRayDuration("862.71ms", &v));
  EXPECT_DOUBLE_EQ(v, 0.86271);
  ASSERT_TRUE(ParseRayDuration("1.73s", &v));
  EXPECT_DOUBLE_EQ(v, 1.73);
  ASSERT_TRUE(ParseRayDuration("5.48us", &v));
  EXPECT_DOUBLE_EQ(v, 5.48e-6);
  ASSERT_TRUE(ParseRayDuration("0.81us", &v));
  EXPECT_FALSE(ParseRayDuration("12", &v));
  EXPECT_FALSE(ParseRayDuration("ms", &v));
  EXPECT_FALSE(ParseRayDuration("-3ms", &v));
  EXPECT_FALSE(ParseRayDuration("nans", &v));
  EXPECT_FALSE(ParseRayDuration("1e999s", &v));
}

TEST(RayStats, ReadsTheRecordedInputBoundRun) {
  auto r = ParseRayDataStats(Recorded("ray-input-bound.txt"), "ib.txt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->ops.size(), 2u);
  const auto& read = r->ops[0];
  EXPECT_EQ(read.number, 1);
  EXPECT_EQ(read.name, "ReadImage");
  EXPECT_EQ(read.line, 1);
  EXPECT_EQ(read.tasks, 4);
  EXPECT_EQ(read.blocks, 4);
  EXPECT_DOUBLE_EQ(read.elapsed_s, 1.73);
  EXPECT_NEAR(read.wall_s.total, 0.86271, 1e-9);
  EXPECT_NEAR(read.wall_s.min, 0.03067, 1e-9);
  EXPECT_NEAR(read.cpu_s.total, 0.13711, 1e-9);
  EXPECT_DOUBLE_EQ(read.rows_per_block.total, 48);
  EXPECT_DOUBLE_EQ(read.bytes_per_block.total, 9437568);
  EXPECT_EQ(read.nodes, 1);
  EXPECT_NEAR(read.single_task_rows_per_s, 55.63859699876401, 1e-9);
  const auto& map = r->ops[1];
  EXPECT_EQ(map.name, "MapBatches(slow_transform)");
  EXPECT_DOUBLE_EQ(map.wall_s.total, 9.19);
  EXPECT_DOUBLE_EQ(map.cpu_s.total, 3.93);
  EXPECT_DOUBLE_EQ(map.function_body_s.total, 9.15);
  EXPECT_EQ(map.nodes, 2);
  // The verbose extra-metrics dict.
  EXPECT_NEAR(map.extra_task_scheduling_s, 0.18304993800120428, 1e-12);
  EXPECT_DOUBLE_EQ(map.extra_spilled_bytes, 0);
  EXPECT_DOUBLE_EQ(map.extra_tasks_failed, 0);
  // The iterator's breakdown.
  const auto& it = r->iter;
  ASSERT_TRUE(it.present);
  EXPECT_DOUBLE_EQ(it.total_s, 14.27);
  EXPECT_DOUBLE_EQ(it.blocked_s, 2.31);
  EXPECT_DOUBLE_EQ(it.first_batch_s, 1.14);
  EXPECT_NEAR(it.user_s, 842.97e-6, 1e-12);
  EXPECT_NEAR(it.get_ref_bundles_s.total, 2.27, 1e-12);
  EXPECT_NEAR(it.get_ref_bundles_s.mean, 0.45448, 1e-12);  // "avg"
  EXPECT_DOUBLE_EQ(it.production_wait_s, 2.28);
  EXPECT_NEAR(it.format_blocked_s, 0.01113, 1e-12);
  EXPECT_EQ(it.batches, 6);
  EXPECT_EQ(it.rows, 48);
  EXPECT_NEAR(r->rows_per_s, 6.332173553665727, 1e-12);
  EXPECT_DOUBLE_EQ(r->runtime_total_s, 7.58);
  EXPECT_TRUE(std::isnan(r->cluster_spilled_mb));
}

TEST(RayStats, PublicStatsWithoutTheIterator) {
  auto r = ParseRayDataStats(Recorded("ray-input-bound-plain.txt"), "plain.txt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->ops.size(), 2u);
  EXPECT_FALSE(r->iter.present);
  EXPECT_TRUE(std::isnan(r->ops[1].extra_task_scheduling_s));  // no verbose dict
  EXPECT_EQ(r->lines_skipped, 6);  // "Operator throughput:" and the input/output row totals
}

TEST(RayStats, FusedOperatorNameKeepsItsArrowAndLambda) {
  auto r = ParseRayDataStats(Recorded("ray-tiny-blocks.txt"), "tiny.txt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->ops.size(), 1u);
  EXPECT_EQ(r->ops[0].name, "ReadRange->MapBatches(<lambda>)");
  EXPECT_EQ(r->ops[0].tasks, 400);
  EXPECT_NEAR(r->ops[0].wall_s.mean, 2.69e-3, 1e-12);
}

TEST(RayStats, SniffedFromTheHeadAndNotConfusedWithOtherKinds) {
  for (const char* f : {"ray-input-bound.txt", "ray-input-bound-plain.txt", "ray-tiny-blocks.txt",
                        "ray-consumer-bound.txt"}) {
    EXPECT_EQ(SniffInput(Recorded(f).substr(0, 200)), InputKind::kRayDataStats) << f;
  }
  EXPECT_EQ(SniffInput("timestamp, index, utilization.gpu [%]\n"), InputKind::kGpuLog);
  EXPECT_EQ(SniffInput("Operator precedence is a thing\n"), InputKind::kUnknown);
  EXPECT_FALSE(LooksLikeRayDataStats("Operator 1 Foo\n"));
}

TEST(RayStats, SpillLinesAndSuboperatorsAsRayPrintsThem) {
  // Ray prints these only when it can read the object store's counters (the recording
  // venv could not, tests/traces/ray/record.py); the text is DatasetStatsSummary's format.
  std::string s =
      "Operator 1 ReadRange->SplitBlocks(2): executed in 0.53s\n"
      "\n"
      "\tSuboperator 0 ReadRange: 32 tasks executed, 64 blocks produced in 0.5s\n"
      "\t* Remote wall time: 1.05ms min, 5.07ms max, 1.55ms mean, 49.48ms total\n"
      "\n"
      "\tSuboperator 1 SplitBlocks(2): 64 blocks produced\n"
      "\t* Remote wall time: 1ms min, 2ms max, 1.5ms mean, 96ms total\n"
      "\n"
      "Operator 2 Map(f): [execution cached]\n"
      "\n"
      "Cluster memory:\n"
      "* Spilled to disk: 512MB\n"
      "* Restored from disk: 12MB\n"
      "\n"
      "Dataset memory:\n"
      "* Spilled to disk: 256MB\n";
  auto r = ParseRayDataStats(s, "spill.txt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->ops.size(), 3u);
  EXPECT_TRUE(r->ops[0].sub_operator);
  EXPECT_EQ(r->ops[0].name, "ReadRange");
  EXPECT_EQ(r->ops[1].name, "SplitBlocks(2)");
  EXPECT_EQ(r->ops[1].tasks, -1);
  EXPECT_EQ(r->ops[1].blocks, 64);
  EXPECT_TRUE(std::isnan(r->ops[1].elapsed_s));
  EXPECT_TRUE(r->ops[2].cached);
  EXPECT_DOUBLE_EQ(r->cluster_spilled_mb, 512);
  EXPECT_DOUBLE_EQ(r->cluster_restored_mb, 12);
  EXPECT_DOUBLE_EQ(r->dataset_spilled_mb, 256);
}

TEST(RayStats, MalformedLinesNameTheFileAndLine) {
  const std::string good = Recorded("ray-input-bound.txt");
  struct Case {
    std::string text, want;
  } cases[] = {
      {Edit(good, "933.08ms min", "9x3.08ms min"), "ib.txt:20: cannot read '9x3.08ms min"},
      {Edit(good, "2.3s mean, 9.19s total", "2.3s mean"), "ib.txt:20:"},
      {Edit(good, "4 tasks executed, 4 blocks produced in 1.73s", "4 tasks executed, 4 blocks"),
       "ib.txt:1: expected 'N blocks produced'"},
      {Edit(good, "produced in 5.66s", "produced in 5.66 seconds"), "ib.txt:19:"},
      {Edit(good, "Total time user thread is blocked by Ray Data iter_batches: 2.31s",
            "Total time user thread is blocked by Ray Data iter_batches: soon"),
       "cannot read 'soon' as a duration"},
      {Edit(good, "* production wait: 2.28s", "* production wait: -2.28s"), "as a duration"},
      {Edit(good, "Total batches consumed: 6", "Total batches consumed: six"), "as a count"},
      {Edit(good, "; 2 nodes used", "; many nodes used"), "nodes used"},
      {Edit(good, "Ray Data throughput: 6.332173553665727 rows/s", "Ray Data throughput: fast"),
       "rows/s"},
      {"* Remote wall time: 1ms min, 1ms max, 1ms mean, 1ms total\n", "spill.txt:1: '* Remote"},
      {"Dataset iterator time breakdown:\n* Total time overall: 1s\n", "without any 'Operator"},
      {"", "without any 'Operator"},
      {"Operator 1 : 4 blocks produced\n", "without a name"},
  };
  for (const auto& c : cases) {
    std::string name = c.want.rfind("spill.txt", 0) == 0 ? "spill.txt" : "ib.txt";
    auto r = ParseRayDataStats(c.text, name);
    ASSERT_FALSE(r.ok()) << c.want;
    EXPECT_NE(r.status().ToString().find(c.want), std::string::npos) << r.status().ToString();
  }
}

TEST(RayStats, ToleratesUnknownLinesAndCrLf) {
  std::string s = Recorded("ray-tiny-blocks.txt");
  std::string crlf;
  for (char c : s) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  crlf = Edit(crlf, "* Tasks per node", "* A line a later Ray adds: 3 things\r\n* Tasks per node");
  auto r = ParseRayDataStats(crlf, "crlf.txt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->ops[0].tasks, 400);
  EXPECT_EQ(r->ops[0].nodes, 2);
}

}  // namespace
}  // namespace stoker::telemetry
