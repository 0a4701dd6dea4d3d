#include "formats/tokens/token_store.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/random.h"
#include "formats/formats_testing.h"
#include "io/fault_env.h"

namespace stoker {
namespace {

std::vector<std::vector<int64_t>> Docs(uint64_t seed, int n, int64_t vocab) {
  Rng r(seed);
  std::vector<std::vector<int64_t>> docs(n);
  for (auto& d : docs) {
    d.resize(1 + r.Below(300));
    for (auto& t : d) t = static_cast<int64_t>(r.Below(static_cast<uint64_t>(vocab)));
  }
  return docs;
}

void Write(const std::string& spec, const std::vector<std::vector<int64_t>>& docs,
           TokenWriterOptions o = {}) {
  auto w = OpenTokenWriter(spec, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (const auto& d : docs) ASSERT_TRUE((*w)->AddDocument(d).ok());
  ASSERT_TRUE((*w)->Finish().ok());
}

void ExpectDocs(const TokenStore& s, const std::vector<std::vector<int64_t>>& docs) {
  ASSERT_EQ(s.num_documents(), docs.size());
  uint64_t total = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    TokenSpan sp = s.Document(i);
    ASSERT_EQ(sp.length, docs[i].size()) << i;
    std::vector<int64_t> got(sp.length);
    sp.CopyTo(0, sp.length, got.data());
    ASSERT_EQ(got, docs[i]) << "document " << i;
    total += sp.length;
  }
  EXPECT_EQ(s.num_tokens(), total);
}

std::vector<uint8_t> ReadAll(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}
void WriteAll(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

TEST(TokenStore, MegatronRoundTripAndLayout) {
  std::string dir = testing::FreshDir("tok-meg");
  auto docs = Docs(1, 50, 50000);
  Write("megatron:" + dir + "/c_text_document", docs);
  auto s = OpenTokenStore(dir + "/c_text_document");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->format(), "megatron");
  EXPECT_EQ((*s)->dtype(), TokenDType::kUInt16);
  EXPECT_TRUE((*s)->zero_copy());
  ExpectDocs(**s, docs);
  // The documented layout: magic, version 1, dtype code 8, S, D = S + 1.
  auto idx = ReadAll(dir + "/c_text_document.idx");
  ASSERT_EQ(idx.size(), 34 + 12 * 50 + 8 * 51u);
  EXPECT_EQ(std::memcmp(idx.data(), "MMIDIDX\0\0", 9), 0);
  EXPECT_EQ(idx[17], 8);
  uint64_t sc, dc;
  std::memcpy(&sc, idx.data() + 18, 8);
  std::memcpy(&dc, idx.data() + 26, 8);
  EXPECT_EQ(sc, 50u);
  EXPECT_EQ(dc, 51u);
  // Opening by the .bin or .idx name finds the same pair.
  EXPECT_TRUE(OpenTokenStore(dir + "/c_text_document.idx").ok());
  EXPECT_TRUE(OpenTokenStore("megatron:" + dir + "/c_text_document.bin").ok());
}

TEST(TokenStore, MegatronInt32ForLargeVocab) {
  std::string dir = testing::FreshDir("tok-meg32");
  auto docs = Docs(2, 20, 128000);
  TokenWriterOptions o;
  o.dtype = OptimalTokenDType(128000);
  EXPECT_EQ(o.dtype, TokenDType::kInt32);
  Write("megatron:" + dir + "/c", docs, o);
  auto s = OpenTokenStore("megatron:" + dir + "/c");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->dtype(), TokenDType::kInt32);
  ExpectDocs(**s, docs);
}

TEST(TokenStore, MegatronIdxNotMatchingBin) {
  std::string dir = testing::FreshDir("tok-megbad");
  Write("megatron:" + dir + "/a", Docs(3, 10, 1000));
  Write("megatron:" + dir + "/b", Docs(4, 10, 1000));
  // b's index with a's tokens.
  std::filesystem::copy_file(dir + "/b.idx", dir + "/a.idx",
                             std::filesystem::copy_options::overwrite_existing);
  auto s = OpenTokenStore("megatron:" + dir + "/a");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(s.status().message().find("a.idx"), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find("does not"), std::string::npos) << s.status().ToString();
  // A truncated .bin names the document that runs past its end.
  Write("megatron:" + dir + "/c", Docs(5, 10, 1000));
  std::filesystem::resize_file(dir + "/c.bin", std::filesystem::file_size(dir + "/c.bin") - 10);
  s = OpenTokenStore("megatron:" + dir + "/c");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("document 9"), std::string::npos) << s.status().ToString();
  // A truncated .idx.
  auto idx = ReadAll(dir + "/b.idx");
  ASSERT_GT(idx.size(), 34u);
  idx.erase(idx.end() - 5, idx.end());
  WriteAll(dir + "/b.idx", idx);
  s = OpenTokenStore("megatron:" + dir + "/b");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("truncated"), std::string::npos) << s.status().ToString();
  // Bad magic.
  WriteAll(dir + "/d.idx", std::vector<uint8_t>(64, 'x'));
  WriteAll(dir + "/d.bin", {});
  s = OpenTokenStore("megatron:" + dir + "/d");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("MMIDIDX"), std::string::npos);
}

TEST(TokenStore, WriterRejectsIdsOutsideVocab) {
  std::string dir = testing::FreshDir("tok-vocab");
  TokenWriterOptions o;
  o.vocab_size = 100;
  auto w = OpenTokenWriter("megatron:" + dir + "/v", o);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->AddDocument({1, 2, 3}).ok());
  Status st = (*w)->AddDocument({5, 100, 7});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("document 1, token 1: id 100"), std::string::npos) << st.ToString();
  // uint16 cannot hold 70000 even without a vocabulary.
  auto w2 = OpenTokenWriter("nanogpt:" + dir + "/x.bin");
  ASSERT_TRUE(w2.ok());
  EXPECT_FALSE((*w2)->AddDocument({70000}).ok());
  // Nothing under the final name from an unfinished writer.
  EXPECT_FALSE(std::filesystem::exists(dir + "/v.idx"));
}

TEST(TokenStore, NanoGptMemmapWithEosSplit) {
  std::string dir = testing::FreshDir("tok-raw");
  auto docs = Docs(6, 30, 50256);
  for (auto& d : docs) d.push_back(50256);  // nanoGPT appends the EOT token
  Write("nanogpt:" + dir + "/train.bin", docs);
  EXPECT_EQ(std::filesystem::file_size(dir + "/train.bin") % 2, 0u);
  auto one = OpenTokenStore(dir + "/train.bin");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ((*one)->format(), "nanogpt");
  EXPECT_EQ((*one)->num_documents(), 1u);  // no eos given: the file is one document
  auto split = OpenTokenStore(dir + "/train.bin?eos=50256");
  ASSERT_TRUE(split.ok());
  ExpectDocs(**split, docs);
  // uint32 memmap.
  TokenWriterOptions o;
  o.dtype = TokenDType::kUInt32;
  Write("raw:" + dir + "/big.bin", docs, o);
  auto s32 = OpenTokenStore("nanogpt:" + dir + "/big.bin?dtype=uint32&eos=50256");
  ASSERT_TRUE(s32.ok());
  ExpectDocs(**s32, docs);
  // Odd byte count = truncated mid-token.
  std::filesystem::resize_file(dir + "/train.bin", std::filesystem::file_size(dir + "/train.bin") - 1);
  auto bad = OpenTokenStore(dir + "/train.bin");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train.bin"), std::string::npos);
}

TEST(TokenStore, LlmcShardsAcrossFilesAndHeaders) {
  std::string dir = testing::FreshDir("tok-llmc");
  auto docs = Docs(7, 40, 50000);
  for (auto& d : docs) d.insert(d.begin(), 50256);  // llm.c prepends EOT
  TokenWriterOptions o;
  o.shard_tokens = 1000;
  Write("llmc:" + dir + "/fw_train_%06d.bin", docs, o);
  auto bytes = ReadAll(dir + "/fw_train_000000.bin");
  int32_t h[3];
  std::memcpy(h, bytes.data(), 12);
  EXPECT_EQ(h[0], 20240520);
  EXPECT_EQ(h[1], 1);
  EXPECT_EQ(h[2], 1000);
  EXPECT_EQ(bytes.size(), 1024 + 2000u);
  auto s = OpenTokenStore(dir + "/fw_train_*.bin?eos=50256");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->format(), "llmc");
  uint64_t total = 0;
  for (auto& d : docs) total += d.size();
  EXPECT_EQ((*s)->num_tokens(), total);
  EXPECT_GT((*s)->files().size(), 5u);
  // Documents cut by a shard end come back as two pieces; all tokens, in order.
  std::vector<int64_t> flat, want;
  for (auto& d : docs) want.insert(want.end(), d.begin(), d.end());
  for (uint64_t i = 0; i < (*s)->num_documents(); ++i) {
    TokenSpan sp = (*s)->Document(i);
    for (uint64_t k = 0; k < sp.length; ++k) flat.push_back(sp.At(k));
  }
  EXPECT_EQ(flat, want);
  // Truncated shard, bad magic, bad version.
  std::filesystem::resize_file(dir + "/fw_train_000001.bin", 1024 + 100);
  auto bad = OpenTokenStore("llmc:" + dir + "/fw_train_000001.bin");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("truncated"), std::string::npos) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("fw_train_000001.bin"), std::string::npos);
  bytes[4] = 9;
  WriteAll(dir + "/v.bin", bytes);
  bad = OpenTokenStore("llmc:" + dir + "/v.bin");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("version 9"), std::string::npos);
  // Llama-3 shards: uint32.
  o.dtype = TokenDType::kUInt32;
  auto big = Docs(8, 5, 128000);
  Write("llmc:" + dir + "/l3_%02d.bin", big, o);
  auto l3 = OpenTokenStore(dir + "/l3_00.bin");
  ASSERT_TRUE(l3.ok()) << l3.status().ToString();
  EXPECT_EQ((*l3)->dtype(), TokenDType::kUInt32);
}

TEST(TokenStore, ArrowAndParquetColumns) {
  std::string dir = testing::FreshDir("tok-arrow");
  auto docs = Docs(9, 70, 32000);
  TokenWriterOptions o;
  o.dtype = TokenDType::kInt32;
  o.rows_per_batch = 16;  // several record batches / row groups
  auto w = OpenTokenWriter("arrow:" + dir + "/data-00000-of-00001.arrow", o);
  if (!w.ok() && w.status().code() == StatusCode::kUnimplemented) GTEST_SKIP() << "no Arrow";
  for (auto& d : docs) ASSERT_TRUE((*w)->AddDocument(d).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto a = OpenTokenStore(dir + "/data-00000-of-00001.arrow");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE((*a)->zero_copy());
  ExpectDocs(**a, docs);
  Write("parquet:" + dir + "/t.parquet", docs, o);
  auto p = OpenTokenStore(dir + "/t.parquet?column=input_ids");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE((*p)->zero_copy());
  ExpectDocs(**p, docs);
  auto missing = OpenTokenStore(dir + "/t.parquet?column=nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  // Garbage named .arrow.
  WriteAll(dir + "/junk.arrow", testing::RandomBytes(3, 500));
  auto junk = OpenTokenStore(dir + "/junk.arrow");
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("junk.arrow"), std::string::npos);
}

TEST(TokenStore, ReadsThroughANonDefaultEnv) {
  std::string dir = testing::FreshDir("tok-env");
  auto docs = Docs(10, 12, 1000);
  Write("megatron:" + dir + "/e", docs);
  FaultInjectionEnv env(Env::Default());
  TokenStoreOptions o;
  o.env = &env;
  auto s = OpenTokenStore("megatron:" + dir + "/e", o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectDocs(**s, docs);
  EXPECT_GT(env.reads.load(), 0);
  // A .bin the Env shows truncated is caught at open, naming the document.
  env.AddRule({.path_contains = "e.bin", .truncate_to = 20});
  auto t = OpenTokenStore("megatron:" + dir + "/e", o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace stoker
