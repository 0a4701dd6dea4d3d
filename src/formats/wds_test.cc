#include "formats/wds.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "formats/formats_testing.h"
#include "io/fault_env.h"

namespace stoker {
namespace {

using testing::ExpectSameSample;
using testing::FreshDir;
using testing::MakeSample;

TEST(WdsNames, SplitAtFirstDotOfBaseName) {
  struct {
    const char* name;
    bool ok;
    const char* key;
    const char* ext;
  } cases[] = {
      {"x.jpg", true, "x", "jpg"},
      {"a/b.seg.PNG", true, "a/b", "seg.png"},
      {"dir.d/file.JPEG", true, "dir.d/file", "jpeg"},
      {"n01/x_1.cls", true, "n01/x_1", "cls"},
      {"noext", false, "", ""},
      {"dir/.hidden", false, "", ""},
      {"a.", true, "a", ""},
  };
  for (const auto& c : cases) {
    std::string k, e;
    EXPECT_EQ(SplitWdsName(c.name, &k, &e), c.ok) << c.name;
    if (c.ok) {
      EXPECT_EQ(k, c.key) << c.name;
      EXPECT_EQ(e, c.ext) << c.name;
    }
  }
  EXPECT_TRUE(IsWdsMetaName("__key__"));
  EXPECT_TRUE(IsWdsMetaName("__meta__/info.json"));
  EXPECT_FALSE(IsWdsMetaName("__meta__.json"));  // as webdataset's regex
  EXPECT_FALSE(IsWdsMetaName("a/__x__"));
  EXPECT_FALSE(IsWdsMetaName("__x"));
}

std::vector<TarMember> Members(std::initializer_list<const char*> names) {
  std::vector<TarMember> v;
  uint64_t off = 512;
  for (const char* n : names) {
    v.push_back({n, off - 512, off, 10});
    off += 1024;
  }
  return v;
}

TEST(WdsGrouping, ConsecutiveMembersWithTheSameKey) {
  WdsShardIndex idx;
  ASSERT_TRUE(GroupWdsMembers("s.tar", Members({"a.jpg", "a.cls", "__meta__", "b.jpg", "noext",
                                                "b.json", "a.txt"}),
                              &idx)
                  .ok());
  ASSERT_EQ(idx.keys, (std::vector<std::string>{"a", "b", "a"}));  // key change ends a sample
  EXPECT_EQ(idx.first, (std::vector<uint32_t>{0, 2, 4}));
  EXPECT_EQ(idx.comps[3].ext, "json");
}

TEST(WdsGrouping, DuplicateExtIsCorruptNamingFileAndMember) {
  WdsShardIndex idx;
  Status st = GroupWdsMembers("s.tar", Members({"a.jpg", "b.jpg", "b.JPG"}), &idx);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("s.tar"), std::string::npos);
  EXPECT_NE(st.message().find("'b.JPG'"), std::string::npos);
  EXPECT_EQ(idx.keys, std::vector<std::string>{"a"});  // complete samples before it are kept
}

TEST(WdsIndexFile, FormatParseRoundTripAndValidation) {
  WdsShardIndex idx;
  ASSERT_TRUE(GroupWdsMembers("s.tar", Members({"a.jpg", "a.cls", "b.jpg"}), &idx).ok());
  std::string text = FormatWdsIndex(idx);
  EXPECT_EQ(text, "v1.2 2\njpg 512 10 a.jpg cls 1536 10 a.cls\njpg 2560 10 b.jpg\n");
  WdsShardIndex back;
  ASSERT_TRUE(ParseWdsIndex(text, "s.tar", 4096, &back).ok());
  EXPECT_EQ(back.keys, idx.keys);
  EXPECT_EQ(back.first, idx.first);
  EXPECT_EQ(ParseWdsIndex(text, "s.tar", 2000, &back).code(), StatusCode::kCorrupt);  // too small
  EXPECT_FALSE(ParseWdsIndex("v1.2 3\njpg 512 10 a.jpg\n", "s.tar", 4096, &back).ok());
  EXPECT_FALSE(ParseWdsIndex("v1.2 1\njpg 513 10 a.jpg\n", "s.tar", 4096, &back).ok());
  EXPECT_FALSE(ParseWdsIndex("v1.1 1\njpg 512 10\n", "s.tar", 4096, &back).ok());
  EXPECT_EQ(WdsIndexPath("d/train-000001.tar"), "d/train-000001.idx");
}

TEST(FormatShardPattern, PrintfIntegers) {
  EXPECT_EQ(*FormatShardPattern("o/t-%06d.tar", 12), "o/t-000012.tar");
  EXPECT_EQ(*FormatShardPattern("o/t-%d.tar", 12), "o/t-12.tar");
  EXPECT_EQ(*FormatShardPattern("o/100%%-%03d", 7), "o/100%-007");
  EXPECT_EQ(*FormatShardPattern("single.tar", 0), "single.tar");
  EXPECT_FALSE(FormatShardPattern("single.tar", 1).ok());
  EXPECT_FALSE(FormatShardPattern("a-%d-%d.tar", 0).ok());
  EXPECT_FALSE(FormatShardPattern("a-%s.tar", 0).ok());
}

class WdsRoundTrip : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir("wds-rt");
    WriterOptions o;
    o.samples_per_shard = 7;
    auto w = WdsWriter::Open(dir_ + "/train-%06d.tar", o);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (uint64_t i = 0; i < 20; ++i) {
      samples_.push_back(MakeSample(i));
      ASSERT_TRUE((*w)->Write(samples_.back()).ok());
    }
    ASSERT_TRUE((*w)->Close().ok());
    ASSERT_EQ((*w)->shards().size(), 3u);
    EXPECT_EQ((*w)->shards()[2].samples, 6u);
  }
  void CheckAll(const Dataset& ds) {
    ASSERT_EQ(ds.size(), samples_.size());
    Sample s;
    for (uint64_t i = 0; i < ds.size(); ++i) {
      ASSERT_TRUE(ds.Read(i, &s).ok());
      ExpectSameSample(samples_[i], s);
      EXPECT_NE(s.Find("cls"), nullptr);  // the label travels as a cls member
      EXPECT_EQ(ds.Key(i), samples_[i].key);
    }
  }
  std::string dir_;
  std::vector<Sample> samples_;
};

TEST_F(WdsRoundTrip, BracePatternDirectoryAndSingleShard) {
  for (const auto& spec : {dir_ + "/train-{000000..000002}.tar", dir_, "wds:" + dir_}) {
    SCOPED_TRACE(spec);
    auto ds = OpenDataset(spec);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    EXPECT_EQ((*ds)->format(), "wds");
    ASSERT_EQ((*ds)->shards().size(), 3u);
    EXPECT_EQ((*ds)->shards()[1].begin, 7u);
    CheckAll(**ds);
  }
  auto one = OpenDataset(dir_ + "/train-000001.tar");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)->size(), 7u);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/train-000001.idx"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/train-000001.tar.partial"));
}

TEST_F(WdsRoundTrip, IndexFileAndHeaderScanAgree) {
  DatasetOptions o;
  auto with = WdsDataset::Open(dir_, o);
  WdsOptions no_idx;
  no_idx.use_index_files = false;
  auto without = WdsDataset::Open(dir_, o, no_idx);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_TRUE((*with)->notes().empty());
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(FormatWdsIndex((*with)->shard_index(s)), FormatWdsIndex((*without)->shard_index(s)));
  }
  CheckAll(**without);
}

TEST_F(WdsRoundTrip, InconsistentIndexFallsBackToScanningWithANote) {
  std::string idx = dir_ + "/train-000000.idx";
  std::ifstream in(idx);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  auto pos = text.find(" 512 ");
  ASSERT_NE(pos, std::string::npos);
  text.replace(pos, 5, " 1024 ");  // points at payload, not after a header
  std::ofstream(idx) << text;
  auto ds = WdsDataset::Open(dir_, {});
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->notes().size(), 1u);
  EXPECT_NE((*ds)->notes()[0].find("train-000000.idx"), std::string::npos);
  CheckAll(**ds);
}

TEST_F(WdsRoundTrip, TruncatedShardFailsOrKeepsCompleteSamples) {
  std::filesystem::remove(dir_ + "/train-000001.idx");
  auto size = std::filesystem::file_size(dir_ + "/train-000001.tar");
  FaultInjectionEnv env;
  FaultRule r;
  r.path_contains = "train-000001.tar";
  r.truncate_to = static_cast<int64_t>(size / 2 + 100);
  env.AddRule(r);
  DatasetOptions o;
  o.env = &env;
  auto bad = OpenDataset(dir_, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad.status().message().find("train-000001.tar"), std::string::npos);
  EXPECT_NE(bad.status().message().find("offset"), std::string::npos);

  o.skip_bad_shards = true;
  auto ds = OpenDataset(dir_, o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->index_errors().size(), 1u);
  uint64_t kept = (*ds)->shards()[1].end - (*ds)->shards()[1].begin;
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, 7u);
  EXPECT_EQ((*ds)->size(), 7 + kept + 6);
  Sample s;
  for (uint64_t i = 0; i < (*ds)->size(); ++i) {
    ASSERT_TRUE((*ds)->Read(i, &s).ok()) << i;
    uint64_t orig = i < 7 + kept ? i : i + (7 - kept);
    ExpectSameSample(samples_[orig], s);
  }
}

TEST_F(WdsRoundTrip, OpenFilesStayBounded) {
  WdsOptions wo;
  wo.max_open_files = 2;
  FaultInjectionEnv env;
  DatasetOptions o;
  o.env = &env;
  auto ds = WdsDataset::Open(dir_, o, wo);
  ASSERT_TRUE(ds.ok());
  int64_t opens_after_index = env.opens.load();
  Sample s;
  for (int pass = 0; pass < 2; ++pass)
    for (uint64_t i = 0; i < (*ds)->size(); ++i) ASSERT_TRUE((*ds)->Read(i, &s).ok());
  EXPECT_LE((*ds)->open_files(), 2u);
  // In-order reading opens each shard once per pass.
  EXPECT_EQ(env.opens.load() - opens_after_index, 6);
}

TEST(WdsWriter, RejectsSamplesThatWouldNotReadBack) {
  std::string dir = FreshDir("wds-reject");
  auto w = WdsWriter::Open(dir + "/x-%d.tar", {});
  ASSERT_TRUE(w.ok());
  Sample s = MakeSample(1);
  s.key = "a.b";
  EXPECT_EQ((*w)->Write(s).code(), StatusCode::kInvalidArgument);
  s.key = "ok";
  s.fields[0].name = "JPG";
  EXPECT_EQ((*w)->Write(s).code(), StatusCode::kInvalidArgument);
  s.fields[0].name = "jpg";
  EXPECT_TRUE((*w)->Write(s).ok());
  EXPECT_EQ((*w)->Write(s).code(), StatusCode::kInvalidArgument);  // same key again
  EXPECT_TRUE((*w)->Close().ok());
}

TEST(WdsWriter, UnclosedShardStaysPartial) {
  std::string dir = FreshDir("wds-partial");
  {
    auto w = WdsWriter::Open(dir + "/x-%03d.tar", {});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write(MakeSample(0)).ok());
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/x-000.tar.partial"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/x-000.tar"));
}

}  // namespace
}  // namespace stoker
