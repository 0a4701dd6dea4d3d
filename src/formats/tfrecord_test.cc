#include "formats/tfrecord.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "formats/checksum.h"
#include "formats/formats_testing.h"
#include "io/memory_file.h"

namespace stoker {
namespace {

using testing::ExpectSameSample;
using testing::FreshDir;
using testing::MakeSample;
using testing::RandomBytes;

TEST(Crc32c, KnownValuesAndBothImplementationsAgree) {
  const char* s = "123456789";
  EXPECT_EQ(Crc32c(s, 9), 0xe3069283u);
  EXPECT_EQ(Crc32cPortable(s, 9), 0xe3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  // 32 zero bytes: the iSCSI test vector (RFC 3720 B.4).
  std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  for (size_t n : {1, 7, 8, 9, 4095, 12288, 12289, 40000, 100003}) {
    auto b = RandomBytes(n, n);
    EXPECT_EQ(Crc32c(b.data(), n), Crc32cPortable(b.data(), n)) << n;
    // Continuing a CRC over a split equals one pass.
    size_t cut = n / 3;
    EXPECT_EQ(Crc32c(b.data() + cut, n - cut, Crc32c(b.data(), cut)), Crc32c(b.data(), n)) << n;
  }
  uint32_t c = 0x12345678;
  EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(c)), c);
  EXPECT_NE(MaskCrc32c(c), c);
}

TEST(XXH64, KnownValuesAndStreamingEqualsOneShot) {
  EXPECT_EQ(XXH64("", 0), 0xef46db3751d8e999ull);
  EXPECT_EQ(XXH64("abc", 3), 0x44bc2cf5ad770999ull);
  auto b = RandomBytes(9, 1000);
  for (size_t cut : {0, 1, 31, 32, 33, 500, 999}) {
    XXH64Hasher h(7);
    h.Update(b.data(), cut);
    h.Update(b.data() + cut, b.size() - cut);
    EXPECT_EQ(h.Digest(), XXH64(b.data(), b.size(), 7)) << cut;
  }
}

std::vector<uint8_t> Framed(const std::vector<std::string>& recs) {
  std::vector<uint8_t> out;
  for (const auto& r : recs)
    AppendTFRecordFrame(reinterpret_cast<const uint8_t*>(r.data()), r.size(), &out);
  return out;
}

TEST(TFRecordFraming, ScanAndParse) {
  auto bytes = Framed({"first", "", std::string(3000, 'x')});
  MemoryFile f("r.tfrecord", bytes);
  TFRecordScan s = ScanTFRecordFile(f);
  ASSERT_TRUE(s.error.ok());
  ASSERT_EQ(s.records.size(), 3u);
  EXPECT_EQ(s.records[1].offset, 16u + 5);
  EXPECT_EQ(s.records[1].size, 16u);
  EXPECT_EQ(s.records[2].length(), 3000u);
  TFRecordScan p = ParseTFRecordBuffer(bytes.data(), bytes.size(), "r.tfrecord");
  ASSERT_TRUE(p.error.ok());
  EXPECT_EQ(p.records.size(), 3u);
}

TEST(TFRecordFraming, DamageNamesFileRecordAndOffset) {
  const auto good = Framed({"aaaa", "bbbbbbbb", "cc"});
  const uint64_t rec1 = 16 + 4;
  struct Case {
    const char* name;
    std::function<void(std::vector<uint8_t>*)> damage;
    const char* msg;
    size_t kept;
    bool scan_sees_it;  // header-only scans do not read data
  } cases[] = {
      {"bad data crc", [&](auto* b) { (*b)[rec1 + 12 + 3] ^= 1; }, "bad data CRC", 1, false},
      {"bad length crc", [&](auto* b) { (*b)[rec1 + 9] ^= 1; }, "bad length CRC", 1, true},
      {"bad length", [&](auto* b) { (*b)[rec1 + 1] ^= 0x10; }, "bad length CRC", 1, true},
      {"truncated data", [&](auto* b) { b->resize(rec1 + 12 + 5); }, "truncated", 1, true},
      {"truncated header", [&](auto* b) { b->resize(rec1 + 7); }, "truncated header", 1, true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto b = good;
    c.damage(&b);
    TFRecordScan p = ParseTFRecordBuffer(b.data(), b.size(), "d.tfrecord");
    ASSERT_FALSE(p.error.ok());
    EXPECT_EQ(p.error.code(), StatusCode::kCorrupt);
    const std::string& m = p.error.message();
    EXPECT_NE(m.find(c.msg), std::string::npos) << m;
    EXPECT_NE(m.find("d.tfrecord: record 1 at offset 20"), std::string::npos) << m;
    EXPECT_EQ(p.records.size(), c.kept);
    MemoryFile f("d.tfrecord", b);
    TFRecordScan s = ScanTFRecordFile(f);
    EXPECT_EQ(!s.error.ok(), c.scan_sees_it) << s.error.ToString();
  }
}

TEST(TFRecordIndex, MustTileTheFile) {
  std::vector<TFRecordEntry> recs = {{0, 20}, {20, 16}, {36, 30}};
  std::string text = FormatTFRecordIndex(recs);
  EXPECT_EQ(text, "0 20\n20 16\n36 30\n");
  std::vector<TFRecordEntry> back;
  ASSERT_TRUE(ParseTFRecordIndex(text, "x", 66, &back).ok());
  EXPECT_EQ(back.size(), 3u);
  EXPECT_FALSE(ParseTFRecordIndex(text, "x", 67, &back).ok());  // file grew
  EXPECT_FALSE(ParseTFRecordIndex("0 20\n21 16\n", "x", 37, &back).ok());
  EXPECT_FALSE(ParseTFRecordIndex("0 abc\n", "x", 20, &back).ok());
}

// ---------------------------------------------------------------------------------------

std::string Varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s += static_cast<char>(v | 0x80);
    v >>= 7;
  }
  s += static_cast<char>(v);
  return s;
}
std::string Len(int field, const std::string& body) {
  return std::string(1, static_cast<char>(field << 3 | 2)) + Varint(body.size()) + body;
}
std::string Entry(const std::string& key, const std::string& feature) {
  return Len(1, Len(1, key) + Len(2, feature));
}

TEST(ExampleDecode, PackedAndUnpackedLists) {
  std::string f32;
  float vals[2] = {1.5f, -2.25f};
  f32.append(reinterpret_cast<const char*>(vals), 8);
  std::string unpacked_f;
  for (float v : vals) unpacked_f += std::string(1, (1 << 3) | 5) + std::string(reinterpret_cast<const char*>(&v), 4);
  std::string unpacked_i = std::string(1, 1 << 3) + Varint(7) + std::string(1, 1 << 3) +
                           Varint(static_cast<uint64_t>(-3));
  std::string features =
      Entry("img", Len(1, Len(1, "AB") + Len(1, "CDE"))) +  // bytes list, two values
      Entry("f_packed", Len(2, Len(1, f32))) + Entry("f_unpacked", Len(2, unpacked_f)) +
      Entry("i_packed", Len(3, Len(1, Varint(300) + Varint(1)))) +
      Entry("i_unpacked", Len(3, unpacked_i)) + Entry("empty", "");
  // An unknown field in Example (field 9, varint) must be skipped.
  std::string ex = Len(1, features) + std::string(1, 9 << 3) + Varint(5);
  std::vector<ExampleFeature> out;
  auto* p = reinterpret_cast<const uint8_t*>(ex.data());
  ASSERT_TRUE(DecodeExample(p, ex.size(), &out).ok());
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0].kind, ExampleFeature::Kind::kBytes);
  ASSERT_EQ(out[0].bytes.size(), 2u);
  EXPECT_EQ(ex.substr(out[0].bytes[1].first, out[0].bytes[1].second), "CDE");
  EXPECT_EQ(out[1].floats, (std::vector<float>{1.5f, -2.25f}));
  EXPECT_EQ(out[2].floats, (std::vector<float>{1.5f, -2.25f}));
  EXPECT_EQ(out[3].ints, (std::vector<int64_t>{300, 1}));
  EXPECT_EQ(out[4].ints, (std::vector<int64_t>{7, -3}));
  EXPECT_EQ(out[5].kind, ExampleFeature::Kind::kNone);

  // Truncations anywhere are kCorrupt, never a crash.
  for (size_t n = 1; n < ex.size() - 2; ++n) {
    Status st = DecodeExample(p, n, &out);
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    }
  }
  EXPECT_FALSE(DecodeExample(p, ex.size() - 3, &out).ok());
}

TEST(ExampleEncode, RoundTripsThroughDecode) {
  ExampleBuilder b;
  std::string img(70000, 'j');
  b.AddBytes("image/encoded", reinterpret_cast<const uint8_t*>(img.data()), img.size());
  b.AddInt64("image/class/label", {42});
  b.AddInt64("many", {-1, 0, 1LL << 40});
  b.AddFloat("bbox", {0.25f, 0.5f});
  std::vector<uint8_t> ser;
  b.SerializeTo(&ser);
  std::vector<ExampleFeature> f;
  ASSERT_TRUE(DecodeExample(ser.data(), ser.size(), &f).ok());
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].name, "image/encoded");
  EXPECT_EQ(std::string(ser.begin() + f[0].bytes[0].first,
                        ser.begin() + f[0].bytes[0].first + f[0].bytes[0].second),
            img);
  EXPECT_EQ(f[2].ints, (std::vector<int64_t>{-1, 0, 1LL << 40}));
  Sample s;
  ASSERT_TRUE(ExampleToSample(ser.data(), f, false, &s).ok());
  EXPECT_EQ(s.label, 42);
  ASSERT_NE(s.Find("jpg"), nullptr);
  EXPECT_EQ(s.Find("image/class/label"), nullptr);  // consumed as the label
  EXPECT_EQ(std::string(s.Find("many")->data.begin(), s.Find("many")->data.end()),
            "-1 0 1099511627776");
  EXPECT_EQ(std::string(s.Find("bbox")->data.begin(), s.Find("bbox")->data.end()), "0.25 0.5");
  Sample raw;
  ASSERT_TRUE(ExampleToSample(ser.data(), f, true, &raw).ok());
  EXPECT_NE(raw.Find("image/encoded"), nullptr);
}

// ---------------------------------------------------------------------------------------

class TFRecordRoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(TFRecordRoundTrip, WriterThenDataset) {
  bool gzip = GetParam();
  std::string dir = FreshDir(gzip ? "tfr-gz" : "tfr");
  WriterOptions o;
  o.samples_per_shard = 6;
  o.gzip = gzip;
  auto w = TFRecordWriter::Open(dir + "/train-%05d.tfrecord", o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  std::vector<Sample> samples;
  for (uint64_t i = 0; i < 15; ++i) {
    samples.push_back(MakeSample(i));
    ASSERT_TRUE((*w)->Write(samples.back()).ok());
  }
  ASSERT_TRUE((*w)->Close().ok());
  ASSERT_EQ((*w)->shards().size(), 3u);
  std::string ext = gzip ? ".tfrecord.gz" : ".tfrecord";
  EXPECT_EQ((*w)->shards()[0].path, dir + "/train-00000" + ext);
  EXPECT_EQ(std::filesystem::exists(dir + "/train-00000.tfrecord.idx"), !gzip);

  auto ds = OpenDataset(dir + "/train-{00000..00002}" + ext);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->format(), "tfrecord");
  ASSERT_EQ((*ds)->size(), 15u);
  Sample s;
  // In order, then out of order (gzip restarts its cursor or hits the recent cache).
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < 15; ++i) order.push_back(i);
  for (uint64_t i : {14, 3, 7, 2, 0, 13, 13, 5}) order.push_back(i);
  for (uint64_t i : order) {
    ASSERT_TRUE((*ds)->Read(i, &s).ok()) << i;
    ExpectSameSample(samples[i], s, false);
  }
  EXPECT_EQ((*ds)->Key(4), "s_4");
}

INSTANTIATE_TEST_SUITE_P(PlainAndGzip, TFRecordRoundTrip, ::testing::Bool());

TEST(TFRecordDataset, CorruptRecordIsReportedOnRead) {
  std::string dir = FreshDir("tfr-bad");
  auto w = TFRecordWriter::Open(dir + "/a.tfrecord", {});
  ASSERT_TRUE(w.ok());
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE((*w)->Write(MakeSample(i)).ok());
  ASSERT_TRUE((*w)->Close().ok());
  uint64_t off1;
  {
    auto ds = TFRecordDataset::Open(dir + "/a.tfrecord", {});
    ASSERT_TRUE(ds.ok());
    uint32_t shard;
    off1 = (*ds)->Record(1, &shard).offset;
  }
  {
    std::fstream f(dir + "/a.tfrecord", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(off1 + 40));
    f.put('\x7f');
  }
  auto ds = TFRecordDataset::Open(dir + "/a.tfrecord", {});
  ASSERT_TRUE(ds.ok());
  Sample s;
  EXPECT_TRUE((*ds)->Read(0, &s).ok());
  Status st = (*ds)->Read(1, &s);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find(fmt::format("a.tfrecord: record 1 at offset {}: bad data CRC", off1)),
            std::string::npos)
      << st.message();
  EXPECT_TRUE((*ds)->Read(2, &s).ok());
}

TEST(TFRecordDataset, TruncatedFileFailsOrKeepsCompleteRecords) {
  std::string dir = FreshDir("tfr-trunc");
  WriterOptions o;
  o.write_index = false;
  auto w = TFRecordWriter::Open(dir + "/a.tfrecord", o);
  ASSERT_TRUE(w.ok());
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE((*w)->Write(MakeSample(i)).ok());
  ASSERT_TRUE((*w)->Close().ok());
  auto size = std::filesystem::file_size(dir + "/a.tfrecord");
  std::filesystem::resize_file(dir + "/a.tfrecord", size - 10);
  auto bad = OpenDataset(dir + "/a.tfrecord");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("record 4 at offset"), std::string::npos)
      << bad.status().message();
  DatasetOptions skip;
  skip.skip_bad_shards = true;
  auto ds = OpenDataset(dir + "/a.tfrecord", skip);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ((*ds)->size(), 4u);
  EXPECT_EQ((*ds)->index_errors().size(), 1u);
}

TEST(TFRecordDataset, StaleIndexIsIgnoredWithANote) {
  std::string dir = FreshDir("tfr-idx");
  auto w = TFRecordWriter::Open(dir + "/a.tfrecord", {});
  ASSERT_TRUE(w.ok());
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE((*w)->Write(MakeSample(i)).ok());
  ASSERT_TRUE((*w)->Close().ok());
  std::ofstream(dir + "/a.tfrecord.idx") << "0 16\n";
  auto ds = TFRecordDataset::Open(dir + "/a.tfrecord", {});
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ((*ds)->size(), 3u);
  ASSERT_EQ((*ds)->notes().size(), 1u);
}

}  // namespace
}  // namespace stoker
