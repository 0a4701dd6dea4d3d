#include "tools/convert.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "formats/formats_testing.h"
#include "io/fault_env.h"

namespace stoker {
namespace {

using testing::FreshDir;
using testing::RandomBytes;

// An ImageFolder tree: 3 classes x 8 files of random bytes (the folder reader does not
// decode, so any bytes do).
std::string MakeFolder(const std::string& name) {
  std::string root = FreshDir(name) + "/src";
  for (int c = 0; c < 3; ++c) {
    std::filesystem::create_directories(root + "/c" + std::to_string(c));
    for (int i = 0; i < 8; ++i) {
      auto b = RandomBytes(c * 100 + i, 200 + 37 * i);
      std::ofstream(root + fmt::format("/c{}/img_{:03d}.jpg", c, c * 8 + i), std::ios::binary)
          .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    }
  }
  return root;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(BracePatternFor, RangesAndLists) {
  EXPECT_EQ(BracePatternFor({"t-000.tar", "t-001.tar", "t-002.tar"}), "t-{000..002}.tar");
  EXPECT_EQ(BracePatternFor({"t-8.tar", "t-9.tar", "t-10.tar"}), "t-{8..10}.tar");
  EXPECT_EQ(BracePatternFor({"only.lmdb"}), "only.lmdb");
  EXPECT_EQ(BracePatternFor({"a.tar", "b.tar"}), "{a.tar,b.tar}");
}

TEST(SampleContentHash, CoversKeyLabelNamesAndBytesButNotTheClsCarrier) {
  Sample a = testing::MakeSample(3), b = testing::MakeSample(3);
  EXPECT_EQ(SampleContentHash(a), SampleContentHash(b));
  b.AddField("cls")->data = {'3'};
  EXPECT_EQ(SampleContentHash(a), SampleContentHash(b));
  b.label = 4;
  EXPECT_NE(SampleContentHash(a), SampleContentHash(b));
  b = a;
  b.fields[1].name = "json";
  EXPECT_NE(SampleContentHash(a), SampleContentHash(b));
  b = a;
  b.fields[0].data[10] ^= 1;
  EXPECT_NE(SampleContentHash(a), SampleContentHash(b));
  b = a;
  b.key += "x";
  EXPECT_NE(SampleContentHash(a), SampleContentHash(b));
}

class ConvertFormats : public ::testing::TestWithParam<std::string> {};

TEST_P(ConvertFormats, ConvertThenVerify) {
  std::string src = MakeFolder("conv-" + GetParam());
  std::string out = DirName(src) + "/out";
  std::string dst = GetParam() == "wds" ? "wds:" + out + "/train-%06d.tar"
                                        : "tfrecord:" + out + "/train-%05d.tfrecord";
  ConvertOptions o;
  o.writer.samples_per_shard = 5;
  o.threads = 3;
  auto r = Convert(src, dst, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->samples, 24u);
  EXPECT_EQ(r->shards.size(), 5u);
  auto m = ReadJson(out + "/stoker-manifest.json");
  EXPECT_TRUE(m["complete"].get<bool>());
  EXPECT_EQ(m["shards"].size(), 5u);
  EXPECT_EQ(m["shards"][4]["samples"].get<int>(), 4);
  EXPECT_EQ(m["checksum"].get<std::string>(), HashHex(r->checksum));

  auto v = Verify(out);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_TRUE(v->ok) << (v->problems.empty() ? "" : v->problems[0]);
  EXPECT_EQ(v->checksum, r->checksum);
  EXPECT_EQ(v->samples, 24u);

  // The converted dataset converts back to the same content (same checksum).
  auto r2 = Convert(GetParam() + ":" + out, "wds:" + DirName(src) + "/again/x-%03d.tar", o);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->checksum, r->checksum);

  // Flip one payload byte in the middle shard: verify names that shard.
  std::string victim = out + "/" + m["shards"][2]["path"].get<std::string>();
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(700);
    char c;
    f.get(c);
    f.seekp(700);
    f.put(static_cast<char>(c ^ 0x20));
  }
  auto bad = Verify(out);
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(bad->ok);
  ASSERT_FALSE(bad->problems.empty());
  EXPECT_NE(bad->problems[0].find(victim), std::string::npos) << bad->problems[0];
}

INSTANTIATE_TEST_SUITE_P(WdsAndTFRecord, ConvertFormats, ::testing::Values("wds", "tfrecord"));

TEST(Convert, InterruptedRunLeavesAnIncompleteMarkerAndResumeCompletesIt) {
  std::string src = MakeFolder("conv-resume");
  std::string out = DirName(src) + "/out";
  std::string dst = "wds:" + out + "/train-%06d.tar";
  ConvertOptions o;
  o.writer.samples_per_shard = 4;
  o.threads = 2;

  FaultInjectionEnv env;
  FaultRule rule;
  rule.path_contains = "img_013.jpg";  // sample 13 (class 1) cannot be read
  rule.fail_read = true;
  env.AddRule(rule);
  ConvertOptions broken = o;
  broken.read.env = &env;
  auto r = Convert(src, dst, broken);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("img_013.jpg"), std::string::npos) << r.status().message();

  auto m = ReadJson(out + "/stoker-manifest.json");
  EXPECT_FALSE(m["complete"].get<bool>());
  EXPECT_EQ(m["shards"].size(), 3u);  // samples 0..11 are in complete shards
  EXPECT_EQ(m["missing"], nlohmann::json::array({12, 24}));
  EXPECT_TRUE(std::filesystem::exists(out + "/train-000003.tar.partial"));
  EXPECT_FALSE(std::filesystem::exists(out + "/train-000003.tar"));
  auto v = Verify(out);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->ok);
  EXPECT_NE(v->problems[0].find("samples [12, 24)"), std::string::npos) << v->problems[0];

  // A resume with different shard options is refused.
  ConvertOptions other = o;
  other.resume = true;
  other.writer.samples_per_shard = 5;
  EXPECT_EQ(Convert(src, dst, other).status().code(), StatusCode::kInvalidArgument);

  ConvertOptions resume = o;
  resume.resume = true;
  auto done = Convert(src, dst, resume);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->resumed_from, 12u);
  EXPECT_EQ(done->samples, 24u);
  EXPECT_FALSE(std::filesystem::exists(out + "/train-000003.tar.partial"));
  auto ok = Verify(out);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->ok) << (ok->problems.empty() ? "" : ok->problems[0]);

  // Same content as one uninterrupted conversion.
  auto fresh = Convert(src, "wds:" + DirName(src) + "/fresh/train-%06d.tar", o);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->checksum, done->checksum);

  // Resuming a complete conversion is a no-op.
  auto again = Convert(src, dst, resume);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->already_complete);
}

}  // namespace
}  // namespace stoker
