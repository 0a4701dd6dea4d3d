#include "pipeline/stats_json.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace stoker {
namespace {

PipelineStats Sample() {
  PipelineStats st;
  st.wall_s = 1.25;
  st.samples = 200;
  st.batches = 7;
  st.bytes_read = 18774132;
  st.samples_per_s = 160.0;
  st.mb_per_s = 15.0193056;
  const char* names[] = {"read", "decode", "augment", "batch"};
  for (int i = 0; i < 4; ++i) {
    StageStats s;
    s.name = names[i];
    s.threads = i == 3 ? 0 : i + 1;
    s.items = 200 - i;
    s.bytes = 1000u * (i + 1);
    s.busy_s = 0.1 * (i + 1);
    s.cpu_s = 0.09 * (i + 1);
    s.wait_input_s = 0.01 * i;
    s.wait_output_s = 0.02 * i;
    s.queue_fill = 0.125;
    s.busy_frac = 0.3;
    s.wait_input_frac = 0.1;
    s.wait_output_frac = 0.05;
    st.stages.push_back(s);
  }
  st.bottleneck = "decode";
  st.consumer_wait_s = 0.5;
  st.consumer_wait_frac = 0.4;
  st.threads = 3;
  st.prefetch = 4;
  st.memory_budget = int64_t(6) << 30;
  st.cpu_budget = 1;
  st.budget_source = "2 cores shared by 2 ranks on this node (LOCAL_WORLD_SIZE=2)";
  st.buffer_bytes = 38535168;
  st.skipped = 1;
  st.skipped_items = {"c0/x.jpg (c0/x.jpg): not a JPEG"};
  st.warnings = {"stalled: no batch for 301.0 s (stall timeout 300 s)"};
  st.tuning = {{0.1, "compute threads 1 -> 2"}, {0.3, "prefetch 2 -> 4"}};
  st.autotune = true;
  st.rank = {1, 2, "RANK/WORLD_SIZE"};
  return st;
}

void ExpectSame(const PipelineStats& a, const PipelineStats& b) {
  EXPECT_EQ(a.wall_s, b.wall_s);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.batches, b.batches);
  EXPECT_EQ(a.bytes_read, b.bytes_read);
  EXPECT_EQ(a.samples_per_s, b.samples_per_s);
  EXPECT_EQ(a.mb_per_s, b.mb_per_s);
  ASSERT_EQ(a.stages.size(), b.stages.size());
  for (size_t i = 0; i < a.stages.size(); ++i) {
    const auto &x = a.stages[i], &y = b.stages[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.threads, y.threads);
    EXPECT_EQ(x.items, y.items);
    EXPECT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(x.busy_s, y.busy_s);
    EXPECT_EQ(x.cpu_s, y.cpu_s);
    EXPECT_EQ(x.wait_input_s, y.wait_input_s);
    EXPECT_EQ(x.wait_output_s, y.wait_output_s);
    EXPECT_EQ(x.queue_fill, y.queue_fill);
    EXPECT_EQ(x.busy_frac, y.busy_frac);
    EXPECT_EQ(x.wait_input_frac, y.wait_input_frac);
    EXPECT_EQ(x.wait_output_frac, y.wait_output_frac);
  }
  EXPECT_EQ(a.bottleneck, b.bottleneck);
  EXPECT_EQ(a.consumer_wait_s, b.consumer_wait_s);
  EXPECT_EQ(a.consumer_wait_frac, b.consumer_wait_frac);
  EXPECT_EQ(a.threads, b.threads);
  EXPECT_EQ(a.prefetch, b.prefetch);
  EXPECT_EQ(a.memory_budget, b.memory_budget);
  EXPECT_EQ(a.cpu_budget, b.cpu_budget);
  EXPECT_EQ(a.budget_source, b.budget_source);
  EXPECT_EQ(a.buffer_bytes, b.buffer_bytes);
  EXPECT_EQ(a.skipped, b.skipped);
  EXPECT_EQ(a.skipped_items, b.skipped_items);
  EXPECT_EQ(a.warnings, b.warnings);
  ASSERT_EQ(a.tuning.size(), b.tuning.size());
  for (size_t i = 0; i < a.tuning.size(); ++i) {
    EXPECT_EQ(a.tuning[i].t_s, b.tuning[i].t_s);
    EXPECT_EQ(a.tuning[i].what, b.tuning[i].what);
  }
  EXPECT_EQ(a.autotune, b.autotune);
  EXPECT_EQ(a.rank.rank, b.rank.rank);
  EXPECT_EQ(a.rank.world_size, b.rank.world_size);
  EXPECT_EQ(a.rank.source, b.rank.source);
  EXPECT_EQ(a.source_notes, b.source_notes);
  EXPECT_EQ(a.source_counters, b.source_counters);
}

TEST(StatsJson, RoundTripIsExact) {
  PipelineStats st = Sample();
  st.source_notes = {"a.tgz: gzip-compressed, read sequentially"};
  st.source_counters = {{"stream_restarts", 3}, {"lag_messages", 12.5}};
  StatsRunInfo run{"imgs", 2, 32, 75329536};
  for (int indent : {2, -1}) {
    std::string text = StatsToJson(st, &run, indent);
    StatsRunInfo back_run;
    auto back = StatsFromJson(text, "m.json", &back_run);
    ASSERT_TRUE(back.ok()) << back.status().message();
    ExpectSame(st, *back);
    EXPECT_EQ(back_run.data, "imgs");
    EXPECT_EQ(back_run.epochs, 2);
    EXPECT_EQ(back_run.batch_size, 32);
    EXPECT_EQ(back_run.peak_rss_bytes, 75329536);
    // Writing what was read gives the same text.
    EXPECT_EQ(StatsToJson(*back, &back_run, indent), text);
  }
  // Without run info, none of its keys.
  auto j = nlohmann::json::parse(StatsToJson(st));
  for (const char* k : {"data", "epochs", "batch_size", "peak_rss_bytes"})
    EXPECT_FALSE(j.contains(k)) << k;
}

// The keys `bench pipeline --json` always wrote keep their names and meaning.
TEST(StatsJson, KeepsTheStableKeys) {
  auto j = nlohmann::json::parse(StatsToJson(Sample(), nullptr));
  for (const char* k :
       {"samples_per_s", "mb_per_s", "samples", "batches", "wall_s", "bottleneck", "threads",
        "prefetch", "autotune", "memory_budget_bytes", "buffer_bytes", "consumer_wait_s",
        "consumer_wait_frac", "rank", "world_size", "skipped", "skipped_items", "stages",
        "tuning"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["memory_budget_bytes"], int64_t(6) << 30);
  for (const char* k : {"name", "threads", "items", "bytes", "busy_s", "cpu_s", "busy_frac",
                        "wait_input_frac", "wait_output_frac", "queue_fill"})
    EXPECT_TRUE(j["stages"][0].contains(k)) << k;
  EXPECT_EQ(j["tuning"][1]["what"], "prefetch 2 -> 4");
}

// A file `stoker bench pipeline --json` wrote before the codec existed reads back.
TEST(StatsJson, ReadsTheRecordedBenchFile) {
  std::ifstream f(std::string(STOKER_SOURCE_DIR) + "/tests/traces/bench-pipeline-decode.json");
  ASSERT_TRUE(f);
  std::stringstream text;
  text << f.rdbuf();
  StatsRunInfo run;
  auto st = StatsFromJson(text.str(), "bench-pipeline-decode.json", &run);
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->samples, 200u);
  EXPECT_EQ(st->bottleneck, "decode");
  ASSERT_EQ(st->stages.size(), 4u);
  EXPECT_EQ(st->stages[1].name, "decode");
  EXPECT_NEAR(st->stages[1].busy_frac, 0.6385, 1e-4);
  EXPECT_EQ(st->memory_budget, 6319017984);
  EXPECT_EQ(st->cpu_budget, 0);  // not recorded then
  EXPECT_EQ(run.batch_size, 32);
  EXPECT_EQ(run.peak_rss_bytes, 75329536);
}

TEST(StatsJson, UnknownKeysAreIgnoredMissingKeysDefault) {
  auto st = StatsFromJson(
      R"({"samples_per_s": 5, "from_the_future": {"x": [1, 2]}, "stages": [{"name": "read",
          "new_field": "y"}], "tuning": [{"t_s": 1, "what": "w", "why": "z"}]})",
      "f.json");
  ASSERT_TRUE(st.ok()) << st.status().message();
  EXPECT_EQ(st->samples_per_s, 5);
  EXPECT_EQ(st->samples, 0u);
  ASSERT_EQ(st->stages.size(), 1u);
  EXPECT_EQ(st->stages[0].cpu_s, -1);  // not recorded
  EXPECT_EQ(st->stages[0].busy_frac, 0);
  ASSERT_EQ(st->tuning.size(), 1u);
  EXPECT_EQ(st->tuning[0].what, "w");
  // Nested under "stats" (as a tool may wrap it) and null as missing.
  auto nested = StatsFromJson(R"({"stats": {"stages": [], "wall_s": null, "threads": 2}})", "n");
  ASSERT_TRUE(nested.ok()) << nested.status().message();
  EXPECT_EQ(nested->threads, 2);
  // The older Python stats() dict: nested rank, "memory_budget".
  auto py = StatsFromJson(
      R"({"stages": [], "memory_budget": 100, "rank": {"rank": 2, "world_size": 4, "source": "options"}})",
      "py");
  ASSERT_TRUE(py.ok()) << py.status().message();
  EXPECT_EQ(py->memory_budget, 100);
  EXPECT_EQ(py->rank.rank, 2);
  EXPECT_EQ(py->rank.world_size, 4);
  EXPECT_EQ(py->rank.source, "options");
}

TEST(StatsJson, BadInputIsAClearError) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"{\"stages\": [", "m.json: invalid JSON"},
      {"[1, 2]", "m.json: pipeline stats must be a JSON object"},
      {"{\"samples_per_s\": 1}", "without a \"stages\" array"},
      {R"({"stages": [], "samples": "many"})", "m.json: \"samples\" must be a non-negative number, got string \"many\""},
      {R"({"stages": [], "samples": -3})", "\"samples\" must be a non-negative number, got -3"},
      {R"({"stages": [], "autotune": 1})", "\"autotune\" must be true or false, got number 1"},
      {R"({"stages": [], "skipped_items": ["a", 2]})", "\"skipped_items\" must be an array of strings"},
      {R"({"stages": [{"name": "read"}, 7]})", "m.json: stages[1] must be an object, got number"},
      {R"({"stages": [{"name": "read", "busy_s": "x"}]})", "m.json: stages[0].\"busy_s\" must be a number, got string \"x\""},
      {R"({"stages": [{"name": 5}]})", "stages[0].\"name\" must be a string, got number 5"},
      {R"({"stages": [], "tuning": {"t_s": 1}})", "\"tuning\" must be an array, got object"},
      {R"({"stages": [], "tuning": [{"t_s": "soon"}]})", "tuning[0].\"t_s\" must be a number"},
      {R"({"stages": [], "threads": 1e12})", "\"threads\" must be an integer, got 1000000000000.0"},
      {R"({"stages": [], "source": [1]})", "m.json: \"source\" must be an object, got array"},
      {R"({"stages": [], "source": {"notes": [3]}})", "source.\"notes\" must be an array of strings"},
      {R"({"stages": [], "source": {"counters": {"hits": "x"}}})", "source.counters.\"hits\" must be a number, got string"},
  };
  for (const auto& c : cases) {
    auto r = StatsFromJson(c.text, "m.json");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << c.text << "\n  got:  " << r.status().message() << "\n  want: " << c.message;
  }
}

}  // namespace
}  // namespace stoker
