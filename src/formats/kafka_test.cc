// The kafka: spec and the value codecs, without a broker (python/tests/test_kafka.py reads
// from a real one).
#include "formats/kafka_dataset.h"
#include "formats/writer.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

namespace stoker {
namespace {

TEST(KafkaSpec, UrlAndPrefixForms) {
  auto a = ParseKafkaSpec("//127.0.0.1:9092,10.0.0.2:9092/train?start=5&end=ts:2026-12-03T10:00:00Z");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->bootstrap, "127.0.0.1:9092,10.0.0.2:9092");
  EXPECT_EQ(a->topic, "train");
  EXPECT_EQ(a->start.kind, KafkaBound::kOffset);
  EXPECT_EQ(a->start.value, 5);
  EXPECT_EQ(a->end.kind, KafkaBound::kTimestamp);
  EXPECT_EQ(a->end.value, 1796292000000);

  auto b = ParseKafkaSpec("train?bootstrap=h:1&partitions=2,0&count=10&value=json&base64=jpg&"
                          "meta=key,offset&rdkafka.fetch.min.bytes=1000");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->bootstrap, "h:1");
  EXPECT_EQ(b->partitions, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(b->count, 10);
  EXPECT_EQ(b->value, KafkaSpec::kJson);
  EXPECT_EQ(b->base64.count("jpg"), 1u);
  EXPECT_EQ(b->meta.size(), 2u);
  EXPECT_EQ(b->config.at("fetch.min.bytes"), "1000");
}

TEST(KafkaSpec, BadSpecsSayWhatIsWrong) {
  auto msg = [](const std::string& s) {
    auto r = ParseKafkaSpec(s);
    EXPECT_FALSE(r.ok()) << s;
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(msg("train").find("no broker"), std::string::npos);
  EXPECT_NE(msg("//h:1").find("kafka://HOST:PORT/TOPIC"), std::string::npos);
  EXPECT_NE(msg("//h:1/t?start=soon").find("start='soon'"), std::string::npos);
  EXPECT_NE(msg("//h:1/t?end=earliest").find("end=earliest"), std::string::npos);
  EXPECT_NE(msg("//h:1/t?ranges=0:5").find("PARTITION:BEGIN-END"), std::string::npos);
  EXPECT_NE(msg("//h:1/t?ranges=0:9-5").find("not a valid range"), std::string::npos);
  EXPECT_NE(msg("//h:1/t?ranges=0:1-5,0:5-6").find("twice"), std::string::npos);
  EXPECT_NE(msg("//h:1/t?value=avro").find("value='avro'"), std::string::npos);
  EXPECT_NE(msg("//h:1/t?meta=headers").find("meta 'headers'"), std::string::npos);
  EXPECT_NE(msg("//h:1/t?offset=3").find("unknown option 'offset'"), std::string::npos);
  EXPECT_NE(msg("//h:1/t?count=-1").find("negative"), std::string::npos);
  EXPECT_NE(msg("//h:1/t?group=").find("group= is empty"), std::string::npos);
  EXPECT_NE(msg("//h:1/t?commit_ms=5").find("commit_ms=5"), std::string::npos);
  EXPECT_NE(msg("//h:1/a b").find("not a topic name"), std::string::npos);
  EXPECT_NE(msg("t?bootstrap=h:1/x").find("not HOST:PORT"), std::string::npos);
}

// A pinned spec parses back to the same window and options.
TEST(KafkaSpec, PinnedRangesRoundTrip) {
  auto s = ParseKafkaSpec(
      "//h:1/t?value=json&base64=jpg,png&meta=timestamp&field=x&timeout_ms=500&group=g1&commit_ms=250");
  ASSERT_TRUE(s.ok());
  std::map<int32_t, std::pair<int64_t, int64_t>> r{{0, {3, 10}}, {2, {0, 7}}};
  std::string pinned = KafkaSpecWithRanges(*s, r);
  ASSERT_EQ(pinned.rfind("kafka:", 0), 0u) << pinned;
  auto back = ParseKafkaSpec(pinned.substr(6));
  ASSERT_TRUE(back.ok()) << pinned << ": " << back.status().ToString();
  EXPECT_EQ(back->ranges, r);
  EXPECT_EQ(back->value, KafkaSpec::kJson);
  EXPECT_EQ(back->base64, s->base64);
  EXPECT_EQ(back->meta, s->meta);
  EXPECT_EQ(back->field, "x");
  EXPECT_EQ(back->timeout_ms, 500);
  EXPECT_EQ(back->group, "g1");
  EXPECT_EQ(back->commit_ms, 250);
  EXPECT_EQ(back->topic, "t");
  EXPECT_EQ(back->bootstrap, "h:1");
}

// What kafka_spec_fuzz found: a bootstrap holding '/' parsed, and its pinned form
// (kafka://BOOTSTRAP/TOPIC?...) read back as another broker and topic.
TEST(KafkaSpec, FuzzFoundBootstrapWithSlashIsRefused) {
  std::ifstream in(std::string(STOKER_SOURCE_DIR) +
                       "/tests/data/fuzz/kafka_spec_fuzz/bootstrap_with_slash.bin",
                   std::ios::binary);
  ASSERT_TRUE(in.good());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto r = ParseKafkaSpec(text);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not"), std::string::npos) << r.status().ToString();
}

TEST(KafkaSpec, Base64) {
  std::vector<uint8_t> out;
  ASSERT_TRUE(DecodeBase64("aGVsbG8gd29ybGQ=", &out));
  EXPECT_EQ(std::string(out.begin(), out.end()), "hello world");
  ASSERT_TRUE(DecodeBase64("aGk", &out));  // unpadded
  EXPECT_EQ(std::string(out.begin(), out.end()), "hi");
  ASSERT_TRUE(DecodeBase64("", &out));
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(DecodeBase64("aGk*", &out));
  EXPECT_FALSE(DecodeBase64("aG=k", &out));
  EXPECT_FALSE(DecodeBase64("a", &out));  // 6 bits cannot end a byte
}


Sample MakeSample() {
  Sample s;
  s.key = "class_1/img_007";
  s.label = 1;
  Field* a = s.AddField("jpg");
  a->data = {0xFF, 0xD8, 0x00, 0x01, 0xFF, 0xD9};
  Field* b = s.AddField("txt");
  b->data = {'h', 'i'};
  s.AddField("empty");
  return s;
}

TEST(KafkaStokerEncoding, RoundTripsKeyLabelAndEveryField) {
  Sample s = MakeSample();
  std::string v = EncodeStokerSample(s);
  ASSERT_EQ(v.substr(0, 4), "STKS");
  Sample out;
  ASSERT_TRUE(DecodeStokerSample(reinterpret_cast<const uint8_t*>(v.data()), v.size(), "m", &out).ok());
  EXPECT_EQ(out.label, 1);
  ASSERT_EQ(out.num_fields, 4u);  // __key__ + 3
  const Field* k = out.Find("__key__");
  ASSERT_TRUE(k);
  EXPECT_EQ(std::string(k->data.begin(), k->data.end()), s.key);
  for (const char* name : {"jpg", "txt", "empty"})
    EXPECT_EQ(out.Find(name)->data, s.Find(name)->data) << name;
}

// Every truncation and a trailing byte are named errors with the byte position, never a read
// past the end (the fuzz target checks the rest).
TEST(KafkaStokerEncoding, CutAndDamagedValuesAreNamed) {
  std::string v = EncodeStokerSample(MakeSample());
  for (size_t n = 0; n < v.size(); ++n) {
    Sample out;
    Status st = DecodeStokerSample(reinterpret_cast<const uint8_t*>(v.data()), n, "topic t p 0 offset 9", &out);
    ASSERT_EQ(st.code(), StatusCode::kCorrupt) << n;
    EXPECT_NE(st.message().find("topic t p 0 offset 9"), std::string::npos) << st.message();
  }
  std::string longer = v + "x";
  Sample out;
  Status st = DecodeStokerSample(reinterpret_cast<const uint8_t*>(longer.data()), longer.size(), "m", &out);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("1 bytes after the last field"), std::string::npos) << st.message();
  std::string bad = v;
  bad[4] = 9;  // version
  EXPECT_NE(DecodeStokerSample(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), "m", &out)
                .message().find("version 9"),
            std::string::npos);
  std::string json = "{\"jpg\": \"...\"}";
  st = DecodeStokerSample(reinterpret_cast<const uint8_t*>(json.data()), json.size(), "m", &out);
  EXPECT_NE(st.message().find("not in stoker's sample encoding"), std::string::npos);
  // A field named twice.
  Sample twice;
  twice.key = "k";
  twice.AddField("a")->data = {1};
  twice.AddField("b")->data = {2};
  std::string t = EncodeStokerSample(twice);
  size_t at = t.find('b', 4 + 1 + 8 + 4 + 1 + 4);
  t[at] = 'a';
  Sample o2;
  st = DecodeStokerSample(reinterpret_cast<const uint8_t*>(t.data()), t.size(), "m", &o2);
  EXPECT_NE(st.message().find("'a' appears twice"), std::string::npos) << st.message();
}

TEST(KafkaWriter, DestinationOptionsAreCheckedBeforeConnecting) {
  if (!KafkaAvailable()) GTEST_SKIP() << "built without librdkafka";
  auto w = OpenDatasetWriter("kafka://127.0.0.1:1/t?start=earliest");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("'start' is not an option of a Kafka destination"),
            std::string::npos) << w.status().ToString();
  w = OpenDatasetWriter("kafka://127.0.0.1:1/t?value=json");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("not json"), std::string::npos);
  w = OpenDatasetWriter("kafka://127.0.0.1:1/bad topic");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("not a topic name"), std::string::npos);
  w = OpenDatasetWriter("kafka://127.0.0.1:1/t?partition=-1");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("partition='-1'"), std::string::npos);
}

// No broker listens: opening fails within the timeout, naming the broker and topic.
TEST(KafkaDataset, UnreachableBrokerIsAClearError) {
  if (!KafkaAvailable()) GTEST_SKIP() << "built without librdkafka";
  auto ds = OpenDataset("kafka://127.0.0.1:1/nothing?timeout_ms=1500");
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("127.0.0.1:1"), std::string::npos) << ds.status().ToString();
  EXPECT_NE(ds.status().message().find("nothing"), std::string::npos) << ds.status().ToString();
}

}  // namespace
}  // namespace stoker
