#include "tools/format_bench.h"

#include <cstdint>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "formats/dataset.h"
#include "formats/lmdb_dataset.h"
#include "formats/writer.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

TEST(FormatBench, ConvertsToEachFormatAndReadsBackEverySample) {
  if (!LmdbAvailable()) GTEST_SKIP() << "needs the lmdb writer for the source";
  std::string dir = fs::temp_directory_path() / ("stoker_fbench_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string src = dir + "/src.lmdb";
  {
    auto w = OpenDatasetWriter("lmdb:" + src);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (int i = 0; i < 48; ++i) {
      Sample s;
      s.key = "k" + std::to_string(i);
      s.label = i % 3;
      s.AddField("jpg")->data.assign(1000 + 37 * i, static_cast<uint8_t>(i));
      s.AddField("cls")->data = {static_cast<uint8_t>('0' + i % 3)};
      ASSERT_TRUE((*w)->Write(s).ok());
    }
    ASSERT_TRUE((*w)->Close().ok());
  }
  FormatBenchOptions o;
  o.source = "lmdb:" + src;
  o.samples = 32;
  o.work_dir = dir + "/work";
  o.repeats = 1;
  std::vector<std::string> lines;
  o.progress = [&](const std::string& l) { lines.push_back(l); };
  auto r = RunFormatBench(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->samples, 32u);
  // Every registered writer appears, after the raw baseline.
  auto writers = DatasetWriterFormats();
  ASSERT_EQ(r->rows.size(), writers.size() + 1);
  EXPECT_EQ(r->rows[0].format, "raw");
  uint64_t payload = 0;
  for (int k = 0; k < 32; ++k) payload += 1000 + 37 * (k * 48 / 32) + 1;
  EXPECT_EQ(r->payload_bytes, payload);
  EXPECT_EQ(r->rows[0].bytes_on_disk, payload);
  for (const auto& row : r->rows) {
    if (row.format == "lmdb" || row.format == "hdf5" || row.format == "parquet" ||
        row.format == "raw") {
      EXPECT_TRUE(row.ok) << row.format << ": " << row.error;
    }
    if (!row.ok) continue;
    EXPECT_TRUE(row.has_cold && row.has_warm) << row.format;
    EXPECT_GE(row.bytes_on_disk, payload) << row.format;
    EXPECT_GE(row.files, 1u);
  }
  auto j = nlohmann::json::parse(FormatBenchJson(*r));
  EXPECT_EQ(j["formats"].size(), r->rows.size());
  EXPECT_NE(FormatBenchHtml(*r).find("<svg"), std::string::npos);
  EXPECT_NE(FormatBenchTable(*r).find("Recommendation"), std::string::npos);
  // Converted copies are removed unless keep.
  for (const auto& row : r->rows) {
    if (row.format == "raw") continue;
    std::string d = o.work_dir + "/" + row.format;
    if (fs::exists(d)) EXPECT_TRUE(fs::is_empty(d)) << d;
  }
  fs::remove_all(dir);
}

TEST(FormatBench, UnknownFormatIsReportedPerRow) {
  if (!LmdbAvailable()) GTEST_SKIP();
  std::string dir = fs::temp_directory_path() / ("stoker_fbench2_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    auto w = OpenDatasetWriter("lmdb:" + dir + "/s.lmdb");
    ASSERT_TRUE(w.ok());
    Sample s;
    s.key = "a";
    s.AddField("bin")->data = {1, 2, 3};
    ASSERT_TRUE((*w)->Write(s).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  FormatBenchOptions o;
  o.source = "lmdb:" + dir + "/s.lmdb";
  o.formats = {"nosuchformat", "lmdb"};
  o.work_dir = dir + "/w";
  o.repeats = 1;
  auto r = RunFormatBench(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows.size(), 3u);
  EXPECT_FALSE(r->rows[1].ok);
  EXPECT_FALSE(r->rows[1].error.empty());
  EXPECT_TRUE(r->rows[2].ok) << r->rows[2].error;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace stoker
