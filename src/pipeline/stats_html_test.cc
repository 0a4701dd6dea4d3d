#include "pipeline/stats_html.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

PipelineStats KafkaStats() {
  PipelineStats st;
  st.wall_s = 2;
  st.samples = 1000;
  st.stages.push_back({"read", 2, 1000, 0, 1.0});
  st.source_counters = {{"kafka_messages", 1000}, {"kafka_bytes", 1e6},
                        {"kafka_fetch_wait_s", 0.25}, {"kafka_lag", 30},
                        {"kafka_lag_p0", 10}, {"kafka_lag_p3", 20}};
  return st;
}

TEST(StatsHtml, KafkaSectionHasLagPerPartitionFetchWaitAndCharts) {
  PipelineStats st = KafkaStats();
  std::vector<StatsPoint> pts;
  for (int i = 0; i <= 40; ++i)  // thinned to 24 points for the charts
    pts.push_back({i * 0.05, static_cast<uint64_t>(25 * i),
                   {{"kafka_lag_p0", 500.0 - 12 * i}, {"kafka_lag_p3", 900.0 - 22 * i},
                    {"kafka_fetch_wait_s", 0.005 * i}}});
  StatsRunInfo run;
  run.data = "kafka://b:9092/t";
  std::string h = StatsToHtml(st, run, pts);
  auto kafka = h.find("<h2>Kafka</h2>");
  ASSERT_NE(kafka, std::string::npos);
  std::string k = h.substr(kafka);
  EXPECT_NE(k.find("<tr><td>0</td><td>10</td></tr>"), std::string::npos);
  EXPECT_NE(k.find("<tr><td>3</td><td>20</td></tr>"), std::string::npos);
  // 0.25 s of the read stage's 1 s busy time.
  EXPECT_NE(k.find("0.250 s (25.0 %"), std::string::npos) << k;
  EXPECT_NE(k.find("Kafka lag per partition"), std::string::npos);
  EXPECT_NE(k.find("partition 3"), std::string::npos);
  EXPECT_NE(k.find("Kafka fetch wait"), std::string::npos);
  EXPECT_NE(h.find("kafka://b:9092/t"), std::string::npos);
}

TEST(StatsHtml, NoKafkaSectionForOtherSourcesAndTheCacheWhenOn) {
  PipelineStats st;
  st.cache.enabled = true;
  st.cache.dir = "/tmp/<c>";
  st.cache.hit_rate = 0.5;
  std::string h = StatsToHtml(st, StatsRunInfo{}, {});
  EXPECT_EQ(h.find("Kafka"), std::string::npos);
  EXPECT_NE(h.find("<h2>Node cache</h2>"), std::string::npos);
  EXPECT_NE(h.find("/tmp/&lt;c&gt;"), std::string::npos);  // escaped
  EXPECT_NE(h.find("50.0 %"), std::string::npos);
}

}  // namespace
}  // namespace stoker
