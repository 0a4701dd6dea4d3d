#include "formats/wds.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "formats/formats_testing.h"
#include "io/fault_env.h"
#include "io/memory_file.h"
#include "io/gzip.h"
#include "io/sniff.h"
#include "pipeline/pipeline.h"

#include <zlib.h>

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

std::vector<uint8_t> Gzip(const std::vector<uint8_t>& in) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<uint8_t> out(deflateBound(&zs, in.size()) + 64);
  zs.next_in = const_cast<uint8_t*>(in.data());
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::vector<uint8_t> v;
  EXPECT_TRUE(Env::Default()->ReadFile(path, &v).ok()) << path;
  return v;
}

void WriteAll(const std::string& path, const std::vector<uint8_t>& v) {
  ASSERT_TRUE(Env::Default()->WriteFile(path, v.data(), v.size()).ok()) << path;
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

namespace stoker {
namespace {

// The round-trip shards, gzip-compressed (.tar.gz for two, .tgz for one), plain removed.
class WdsCompressed : public WdsRoundTrip {
 protected:
  void SetUp() override {
    WdsRoundTrip::SetUp();
    for (int i = 0; i < 3; ++i) {
      std::string plain = fmt::format("{}/train-{:06d}.tar", dir_, i);
      std::string gz = i == 1 ? fmt::format("{}/train-{:06d}.tgz", dir_, i) : plain + ".gz";
      WriteAll(gz, Gzip(ReadAll(plain)));
      std::filesystem::remove(plain);
      std::filesystem::remove(fmt::format("{}/train-{:06d}.idx", dir_, i));
    }
  }
};

TEST_F(WdsCompressed, ReadsTheSameSamplesSequentially) {
  for (const auto& spec : {dir_, "wds:" + dir_, dir_ + "/train-000000.tar.gz"}) {
    auto ds = OpenDataset(spec);
    ASSERT_TRUE(ds.ok()) << spec << ": " << ds.status().ToString();
    if (spec.find("000000") != std::string::npos) {
      ASSERT_EQ((*ds)->size(), 7u);
      continue;
    }
    CheckAll(**ds);
    // It says it is read sequentially, and refuses a random-access request.
    auto notes = (*ds)->notes();
    ASSERT_EQ(notes.size(), 3u);
    EXPECT_NE(notes[0].find("read sequentially"), std::string::npos) << notes[0];
    Status ra = (*ds)->CheckRandomAccess();
    EXPECT_EQ(ra.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ra.message().find("train-000000.tar.gz is gzip-compressed"), std::string::npos)
        << ra.ToString();
  }
  EXPECT_TRUE(WdsDataset::Open(dir_, {}).value()->compressed_shards() == 3u);
}

// Through the pipeline: the stats carry the dataset's notes (read sequentially) and its
// stream-restart counter, as `bench pipeline` prints them.
TEST_F(WdsCompressed, PipelineStatsReportSequentialReadsAndRestarts) {
  PipelineOptions o;
  o.data = dir_;
  o.mode = DecodeMode::kRaw;
  o.batch_size = 4;
  o.threads = 1;
  o.prefetch = 1;
  auto p = Pipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  for (int epoch = 0; epoch < 2; ++epoch) {
    ASSERT_TRUE((*p)->StartEpoch(epoch).ok());
    while ((*p)->Next().ok()) {
    }
  }
  PipelineStats st = (*p)->Stats();
  ASSERT_EQ(st.source_notes.size(), 3u);
  EXPECT_NE(st.source_notes[0].find("read sequentially"), std::string::npos);
  ASSERT_EQ(st.source_counters.count("stream_restarts"), 1u);
  // The second epoch starts each shard's stream again: at least one restart per shard.
  EXPECT_GE(st.source_counters["stream_restarts"], 3.0);
}

TEST_F(WdsCompressed, OutOfOrderReadsUseReadAheadThenRestart) {
  auto ds = WdsDataset::Open(dir_, {});
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  Sample s;
  // Within shard 0: 6 first (passing 0..5, kept in memory), then 0..5: no restart.
  for (uint64_t i : {6, 0, 3, 1, 2, 5, 4}) {
    ASSERT_TRUE((*ds)->Read(i, &s).ok());
    ExpectSameSample(samples_[i], s);
  }
  EXPECT_EQ((*ds)->stream_restarts(), 0u);
  // Again (a second epoch): behind the stream, nothing kept: one restart, same bytes.
  ASSERT_TRUE((*ds)->Read(2, &s).ok());
  ExpectSameSample(samples_[2], s);
  EXPECT_EQ((*ds)->stream_restarts(), 1u);
  // No read-ahead budget: every read behind the stream restarts it, still correct.
  WdsOptions tight;
  tight.stream_cache_bytes = 0;
  auto t = WdsDataset::Open(dir_, {}, tight);
  ASSERT_TRUE(t.ok());
  for (uint64_t i : {13, 8, 19, 7}) {
    ASSERT_TRUE((*t)->Read(i, &s).ok());
    ExpectSameSample(samples_[i], s);
  }
  EXPECT_EQ((*t)->stream_restarts(), 2u);  // 8 after 13, 7 after 8 (19: a fresh stream)
}

TEST_F(WdsCompressed, DamagedStreamFailsNamingTheShardOrKeepsCompleteSamples) {
  std::string p = dir_ + "/train-000002.tar.gz";
  auto gz = ReadAll(p);
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 40; ++i) gz[i] ^= 0x5a;
  WriteAll(p, gz);
  auto bad = OpenDataset(dir_);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad.status().message().find("train-000002.tar.gz"), std::string::npos)
      << bad.status().ToString();
  DatasetOptions o;
  o.skip_bad_shards = true;
  auto ds = OpenDataset(dir_, o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->index_errors().size(), 1u);
  EXPECT_GE((*ds)->size(), 14u);
  EXPECT_LT((*ds)->size(), 20u);
  Sample s;
  for (uint64_t i = 0; i < (*ds)->size(); ++i) {
    ASSERT_TRUE((*ds)->Read(i, &s).ok()) << i;
    ExpectSameSample(samples_[i], s);
  }
}

TEST(WdsMembers, GzMembersAreDecompressedAndDirectoriesIgnored) {
  std::string dir = FreshDir("wds-gzm");
  std::unique_ptr<WritableFile> f = Env::Default()->NewWritableFile(dir + "/m.tar").value();
  TarWriter tw(f.get());
  std::string txt = "a caption";
  auto gz = Gzip(std::vector<uint8_t>(txt.begin(), txt.end()));
  ASSERT_TRUE(tw.Add("a.jpg", "J", 1).ok());
  ASSERT_TRUE(tw.Add("a.txt.gz", gz.data(), gz.size()).ok());
  ASSERT_TRUE(tw.Add("a.cls.gz", Gzip({'3'}).data(), Gzip({'3'}).size()).ok());
  ASSERT_TRUE(tw.Add("b.jpg", "K", 1).ok());
  ASSERT_TRUE(tw.Add("b.txt.gz", "not gzip", 8).ok());
  ASSERT_TRUE(tw.Add("c.jpg", "L", 1).ok());
  ASSERT_TRUE(tw.Add("c.jpg.gz", gz.data(), gz.size()).ok());
  ASSERT_TRUE(tw.Finish().ok());
  ASSERT_TRUE(f->Close().ok());
  auto ds = OpenDataset(dir + "/m.tar");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->size(), 3u);
  Sample s;
  ASSERT_TRUE((*ds)->Read(0, &s).ok());
  ASSERT_NE(s.Find("txt"), nullptr);
  EXPECT_EQ(std::string(s.Find("txt")->data.begin(), s.Find("txt")->data.end()), txt);
  EXPECT_EQ(s.Find("txt.gz"), nullptr);
  EXPECT_EQ(s.label, 3);  // from the decompressed cls
  Status st = (*ds)->Read(1, &s);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("m.tar:member 'b.txt.gz'"), std::string::npos) << st.ToString();
  st = (*ds)->Read(2, &s);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("already"), std::string::npos) << st.ToString();
}

TEST(WdsSniff, NotATarSaysWhatTheFileIs) {
  std::string dir = FreshDir("wds-sniff");
  struct {
    std::vector<uint8_t> bytes;
    const char* what;
  } cases[] = {
      {{'P', 'K', 3, 4}, "a zip archive"},
      {{0x28, 0xb5, 0x2f, 0xfd}, "a zstd stream"},
      {{'B', 'Z', 'h', '9'}, "a bzip2 stream"},
      {{0xfd, '7', 'z', 'X', 'Z', 0}, "an xz stream"},
      {{}, "an empty file"},
      {{'h', 'i', ' ', 't', 'h', 'e', 'r', 'e', '\n'}, "text starting 'hi there.'"},
  };
  for (auto& c : cases) {
    std::vector<uint8_t> b = c.bytes;
    if (!b.empty() && b[0] != 'h') b.resize(2048, 0x11);  // binary: padded past a block
    WriteAll(dir + "/x.tar", b);
    auto ds = OpenDataset(dir + "/x.tar");
    ASSERT_FALSE(ds.ok()) << c.what;
    EXPECT_EQ(ds.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(ds.status().message().find(c.what), std::string::npos) << ds.status().ToString();
    EXPECT_EQ(ds.status().message().find("checksum"), std::string::npos);
  }
  // A tar whose first header is damaged keeps the tar error.
  std::vector<uint8_t> t(1536, 0);
  std::memcpy(t.data(), "a.jpg", 5);
  std::memcpy(t.data() + 257, "ustar", 5);
  WriteAll(dir + "/x.tar", t);
  auto ds = OpenDataset(dir + "/x.tar");
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("checksum"), std::string::npos) << ds.status().ToString();
}

TEST(GzipStreamFile, ForwardReadsAndRestarts) {
  std::vector<uint8_t> plain(300000);
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<uint8_t>(i * 7 + i / 1000);
  std::shared_ptr<RandomAccessFile> f =
      std::make_shared<MemoryFile>("p.gz", Gzip(plain));
  GzipStreamFile g(f);
  EXPECT_EQ(g.size(), GzipStreamFile::kUnknownSize);
  uint8_t b[100];
  ASSERT_EQ(g.ReadAt(1000, 100, b).value(), 100u);
  EXPECT_EQ(0, std::memcmp(b, plain.data() + 1000, 100));
  ASSERT_EQ(g.ReadAt(200000, 100, b).value(), 100u);
  EXPECT_EQ(0, std::memcmp(b, plain.data() + 200000, 100));
  EXPECT_EQ(g.restarts(), 0u);
  ASSERT_EQ(g.ReadAt(5, 100, b).value(), 100u);
  EXPECT_EQ(0, std::memcmp(b, plain.data() + 5, 100));
  EXPECT_EQ(g.restarts(), 1u);
  ASSERT_EQ(g.ReadAt(plain.size() - 10, 100, b).value(), 10u);
  EXPECT_EQ(g.size(), plain.size());
  std::vector<uint8_t> out;
  auto gz = Gzip(plain);
  ASSERT_TRUE(GunzipBuffer(gz.data(), gz.size(), &out).ok());
  EXPECT_EQ(out, plain);
  EXPECT_EQ(GunzipBuffer(gz.data(), gz.size(), &out, 1000).code(), StatusCode::kCorrupt);
  EXPECT_EQ(GunzipBuffer(gz.data(), gz.size() / 2, &out).code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace stoker
