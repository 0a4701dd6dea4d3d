// Delta Lake log replay and the delta dataset on hand-written logs in a MemoryEnv (data files
// written by stoker's Parquet writer): replay of adds and removes, time travel, partitions,
// column selection, incremental reads, and bad input (missing or corrupt commits and
// checkpoints, absent data files, reader features stoker does not implement). Tables written
// by deltalake (delta-rs), with real checkpoints, are tested in python/tests/test_delta.py.
#include <cstdint>
#include <gtest/gtest.h>

#include "formats/delta_dataset.h"
#include "formats/delta_log.h"
#include "formats/formats_testing.h"
#include "formats/parquet_dataset.h"
#include "formats/writer.h"
#include "io/memory_env.h"

namespace stoker {
namespace {

constexpr const char* kProtocol = R"({"protocol":{"minReaderVersion":1,"minWriterVersion":2}})";
constexpr const char* kMeta =
    R"({"metaData":{"id":"t","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[{\"name\":\"key\",\"type\":\"string\",\"nullable\":true,\"metadata\":{}},{\"name\":\"label\",\"type\":\"long\",\"nullable\":true,\"metadata\":{}},{\"name\":\"jpg\",\"type\":\"binary\",\"nullable\":true,\"metadata\":{}},{\"name\":\"txt\",\"type\":\"binary\",\"nullable\":true,\"metadata\":{}},{\"name\":\"split\",\"type\":\"string\",\"nullable\":true,\"metadata\":{}},{\"name\":\"year\",\"type\":\"integer\",\"nullable\":true,\"metadata\":{}}]}","partitionColumns":["split","year"],"configuration":{},"createdTime":1}})";

class DeltaLog : public ::testing::Test {
 protected:
  bool SkipWithoutDelta() {
    if (!DeltaAvailable()) {
      return true;
    }
    return false;
  }
  // Writes a Parquet data file of samples [first, first + n) at table/<rel>.
  void DataFile(const std::string& rel, uint64_t first, uint64_t n) {
    WriterOptions wo;
    wo.env = &env_;
    auto w = OpenParquetWriter("/t/" + rel, wo);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (uint64_t i = first; i < first + n; ++i) ASSERT_TRUE((*w)->Write(testing::MakeSample(i)).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  static std::string Add(const std::string& path, const std::string& split, int year,
                         const std::string& extra = "") {
    return fmt::format(
        R"({{"add":{{"path":"{}","partitionValues":{{"split":"{}","year":"{}"}},"size":1,"modificationTime":1,"dataChange":true{}}}}})",
        path, split, year, extra);
  }
  static std::string Remove(const std::string& path, bool data_change = true) {
    return fmt::format(R"({{"remove":{{"path":"{}","deletionTimestamp":5,"dataChange":{}}}}})",
                       path, data_change ? "true" : "false");
  }
  void Commit(int64_t v, const std::vector<std::string>& actions) {
    std::string text = R"({"commitInfo":{"timestamp":1,"operation":"WRITE"}})";
    text += "\n";
    for (const auto& a : actions) text += a + "\n";
    ASSERT_TRUE(env_.WriteFile(fmt::format("/t/_delta_log/{:020d}.json", v), text.data(), text.size()).ok());
  }
  // v0: two files (train/2024: samples 0..9, val/2025: 10..14); v1: append train/2025
  // (15..22); v2: remove the val file, append train/2024 (23..25).
  void ThreeVersions() {
    ASSERT_TRUE(env_.CreateDirs("/t/_delta_log").ok());
    DataFile("split=train/year=2024/a.parquet", 0, 10);
    DataFile("split=val/year=2025/b.parquet", 10, 5);
    DataFile("split=train/year=2025/c%20d.parquet", 15, 8);
    DataFile("split=train/year=2024/e.parquet", 23, 3);
    Commit(0, {kProtocol, kMeta, Add("split=train/year=2024/a.parquet", "train", 2024),
               Add("split=val/year=2025/b.parquet", "val", 2025)});
    // The log escapes the space in the file name ("c%20d" on disk is "c d" after decoding,
    // so the file on disk is written with the decoded name below).
    Commit(1, {Add("split=train/year=2025/c%2520d.parquet", "train", 2025)});
    Commit(2, {Remove("split=val/year=2025/b.parquet"),
               Add("split=train/year=2024/e.parquet", "train", 2024)});
  }
  Result<std::unique_ptr<Dataset>> Open(const std::string& spec) {
    DatasetOptions o;
    o.env = &env_;
    return OpenDataset("delta:/t" + spec, o);
  }
  std::vector<std::string> Keys(const Dataset& ds) {
    std::vector<std::string> keys;
    Sample s;
    for (uint64_t i = 0; i < ds.size(); ++i) {
      Status st = ds.Read(i, &s);
      EXPECT_TRUE(st.ok()) << st.ToString();
      keys.push_back(s.key);
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }
  static std::vector<std::string> Range(uint64_t a, uint64_t b) {
    std::vector<std::string> out;
    for (uint64_t i = a; i < b; ++i) out.push_back("s_" + std::to_string(i));
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::vector<std::string> Cat(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    std::sort(a.begin(), a.end());
    return a;
  }
  MemoryEnv env_;
};

#define SKIP_WITHOUT_DELTA() \
  if (SkipWithoutDelta()) GTEST_SKIP() << "built without simdjson or Parquet"

TEST_F(DeltaLog, ReplaysAddsAndRemovesAtEachVersion) {
  SKIP_WITHOUT_DELTA();
  ThreeVersions();
  // The file name with an escaped '%': the log says c%2520d → c%20d on disk.
  auto latest = Open("");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ((*latest)->format(), "delta");
  EXPECT_EQ(DeltaSnapshotOf(**latest)->version, 2);
  EXPECT_EQ((*latest)->shards().size(), 3u);
  EXPECT_EQ(Keys(**latest), Cat(Cat(Range(0, 10), Range(15, 23)), Range(23, 26)));
  auto v0 = Open("?version=0");
  ASSERT_TRUE(v0.ok()) << v0.status().ToString();
  EXPECT_EQ(Keys(**v0), Range(0, 15));
  auto v1 = Open("?version=1");
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(Keys(**v1), Range(0, 23));
  EXPECT_EQ(Open("?version=3").status().code(), StatusCode::kNotFound);
}

TEST_F(DeltaLog, PartitionValuesAreFieldsAndFilterFiles) {
  SKIP_WITHOUT_DELTA();
  ThreeVersions();
  auto ds = Open("?version=1&where=split=train&where=year>=2025");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(Keys(**ds), Range(15, 23));
  Sample s;
  ASSERT_TRUE((*ds)->Read(0, &s).ok());
  ASSERT_NE(s.Find("split"), nullptr);
  EXPECT_EQ(std::string(s.Find("split")->data.begin(), s.Find("split")->data.end()), "train");
  EXPECT_EQ(std::string(s.Find("year")->data.begin(), s.Find("year")->data.end()), "2025");
  EXPECT_NE(s.Find("jpg"), nullptr);
  EXPECT_EQ(s.label, 15 % 5);
  auto in = Open("?version=0&where=split in val|test");
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(Keys(**in), Range(10, 15));
  auto ne = Open("?where=year!=2024");
  ASSERT_TRUE(ne.ok());
  EXPECT_EQ(Keys(**ne), Range(15, 23));
  auto bad = Open("?where=jpg=x");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("partition columns (split, year)"), std::string::npos)
      << bad.status().message();
}

TEST_F(DeltaLog, ColumnSelectionReadsOnlyTheNamedColumns) {
  SKIP_WITHOUT_DELTA();
  ThreeVersions();
  auto ds = Open("?columns=jpg,split");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  Sample s;
  ASSERT_TRUE((*ds)->Read(0, &s).ok());
  EXPECT_NE(s.Find("jpg"), nullptr);
  EXPECT_NE(s.Find("split"), nullptr);
  EXPECT_EQ(s.Find("txt"), nullptr);
  EXPECT_EQ(s.Find("year"), nullptr);
  EXPECT_EQ(s.label, -1);  // label not selected
  // Without a key column the key names the data file and row.
  EXPECT_EQ(s.key, "split=train/year=2024/a.parquet:0");
  auto bad = Open("?columns=jpg,nope");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'nope'"), std::string::npos);
}

TEST_F(DeltaLog, IncrementalReadTakesWhatLaterVersionsAppended) {
  SKIP_WITHOUT_DELTA();
  ThreeVersions();
  auto since0 = Open("?version=1&since=0");
  ASSERT_TRUE(since0.ok()) << since0.status().ToString();
  EXPECT_EQ(Keys(**since0), Range(15, 23));
  // Version 2 deleted data (a data-changing remove): an appends-only read refuses it.
  auto since1 = Open("?since=1");
  EXPECT_EQ(since1.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(since1.status().message().find("version 2: split=val/year=2025/b.parquet"),
            std::string::npos)
      << since1.status().message();
}

TEST_F(DeltaLog, MissingCommitIsNamed) {
  SKIP_WITHOUT_DELTA();
  ThreeVersions();
  ASSERT_TRUE(env_.RemoveFile("/t/_delta_log/00000000000000000001.json").ok());
  auto ds = Open("");
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find("00000000000000000001.json"), std::string::npos)
      << ds.status().message();
  EXPECT_TRUE(Open("?version=0").ok());  // earlier versions stay readable
}

TEST_F(DeltaLog, CorruptCommitNamesFileAndLine) {
  SKIP_WITHOUT_DELTA();
  ThreeVersions();
  std::string text = std::string(kProtocol) + "\n{\"add\":{\"path\":\"x.parquet\",\"partitionVal";
  ASSERT_TRUE(env_.WriteFile("/t/_delta_log/00000000000000000001.json", text.data(), text.size()).ok());
  auto ds = Open("");
  EXPECT_EQ(ds.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(ds.status().message().find("00000000000000000001.json: line 2"), std::string::npos)
      << ds.status().message();
  text = "{\"add\":{\"size\":3}}\n";
  ASSERT_TRUE(env_.WriteFile("/t/_delta_log/00000000000000000001.json", text.data(), text.size()).ok());
  ds = Open("");
  EXPECT_EQ(ds.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(ds.status().message().find("'path' is missing"), std::string::npos)
      << ds.status().message();
}

TEST_F(DeltaLog, CorruptCheckpointIsNamedMissingOneFallsBackToCommits) {
  SKIP_WITHOUT_DELTA();
  ThreeVersions();
  std::string junk = "PAR1 this is not a checkpoint";
  ASSERT_TRUE(env_.WriteFile("/t/_delta_log/00000000000000000001.checkpoint.parquet", junk.data(),
                             junk.size()).ok());
  auto ds = Open("");
  EXPECT_EQ(ds.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(ds.status().message().find("00000000000000000001.checkpoint.parquet"),
            std::string::npos)
      << ds.status().message();
  // _last_checkpoint naming a checkpoint that is not there: a note, replay from commits.
  ASSERT_TRUE(env_.RemoveFile("/t/_delta_log/00000000000000000001.checkpoint.parquet").ok());
  std::string hint = R"({"version":1,"size":4})";
  ASSERT_TRUE(env_.WriteFile("/t/_delta_log/_last_checkpoint", hint.data(), hint.size()).ok());
  ds = Open("");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  bool noted = false;
  for (const auto& n : (*ds)->notes()) noted |= n.find("_last_checkpoint") != std::string::npos;
  EXPECT_TRUE(noted);
  // Without commit 0 and without a checkpoint, no version can be rebuilt.
  ASSERT_TRUE(env_.RemoveFile("/t/_delta_log/00000000000000000000.json").ok());
  ds = Open("");
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find("cannot be reconstructed"), std::string::npos)
      << ds.status().message();
}

TEST_F(DeltaLog, AbsentDataFileIsNamedWithItsVersion) {
  SKIP_WITHOUT_DELTA();
  ThreeVersions();
  ASSERT_TRUE(env_.RemoveFile("/t/split=train/year=2024/e.parquet").ok());
  auto ds = Open("");
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find("/t/split=train/year=2024/e.parquet (added in version 2)"),
            std::string::npos)
      << ds.status().message();
  DatasetOptions o;
  o.env = &env_;
  o.skip_bad_shards = true;
  auto skipped = OpenDataset("delta:/t", o);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ((*skipped)->size(), 18u);
  EXPECT_EQ((*skipped)->index_errors().size(), 1u);
}

TEST_F(DeltaLog, RefusesReaderFeaturesItDoesNotImplement) {
  SKIP_WITHOUT_DELTA();
  ThreeVersions();
  Commit(3, {R"({"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors"]}})"});
  auto ds = Open("");
  EXPECT_EQ(ds.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(ds.status().message().find("deletion vectors"), std::string::npos);
  EXPECT_NE(ds.status().message().find("/t"), std::string::npos);
  EXPECT_TRUE(Open("?version=2").ok());  // the older version had no such feature
  Commit(3, {R"({"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["timestampNtz"],"writerFeatures":["timestampNtz"]}})"});
  EXPECT_TRUE(Open("").ok());
  // Column mapping through the table property, and a deletion vector on an add.
  std::string meta = kMeta;
  meta.replace(meta.find(R"("configuration":{})"), 18,
               R"("configuration":{"delta.columnMapping.mode":"name"})");
  Commit(3, {meta});
  ds = Open("");
  EXPECT_EQ(ds.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(ds.status().message().find("column mapping"), std::string::npos)
      << ds.status().message();
  Commit(3, {Add("split=train/year=2024/e.parquet", "train", 2024,
                 R"(,"deletionVector":{"storageType":"u","pathOrInlineDv":"ab","offset":1,"sizeInBytes":4,"cardinality":1})")});
  ds = Open("");
  EXPECT_EQ(ds.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(ds.status().message().find("e.parquet has a deletion vector"), std::string::npos)
      << ds.status().message();
}

TEST_F(DeltaLog, NotATable) {
  SKIP_WITHOUT_DELTA();
  ASSERT_TRUE(env_.CreateDirs("/t").ok());
  auto ds = Open("");
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find("not a Delta table"), std::string::npos);
  EXPECT_EQ(Open("?bogus=1").status().code(), StatusCode::kInvalidArgument);
}

TEST(DeltaSpec, Timestamps) {
  EXPECT_EQ(*ParseDeltaTimestamp("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(*ParseDeltaTimestamp("1970-01-02"), 86400000);
  EXPECT_EQ(*ParseDeltaTimestamp("2026-12-03T10:00:00.25Z"), 1796292000250);
  EXPECT_EQ(*ParseDeltaTimestamp("2026-12-03T11:00:00+01:00"), 1796292000000);
  EXPECT_EQ(*ParseDeltaTimestamp("1796292000000"), 1796292000000);
  EXPECT_FALSE(ParseDeltaTimestamp("yesterday").ok());
  EXPECT_FALSE(ParseDeltaTimestamp("2026-13-01").ok());
  auto spec = ParseDeltaSpec("/a/b/?version=3&columns=x,y&where=k in a|b");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->table, "/a/b");
  EXPECT_EQ(*spec->snapshot.version, 3);
  EXPECT_EQ(spec->columns->size(), 2u);
  ASSERT_EQ(spec->where.size(), 1u);
  EXPECT_EQ(spec->where[0].op, "in");
  EXPECT_EQ(spec->where[0].values, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(DeltaPercentDecode("a%20b%2x%"), "a b%2x%");
}

}  // namespace
}  // namespace stoker
