#include "tokens/token_pipeline.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "core/random.h"
#include "formats/formats_testing.h"

namespace stoker::tokens {
namespace {

// A corpus of n documents with lengths 1..max_len; token t of document d is
// (d * 7919 + t) % 50000, so any delivered token can be checked against its origin.
int64_t TokenOf(uint64_t doc, uint64_t t) { return static_cast<int64_t>((doc * 7919 + t) % 50000); }

std::string MakeCorpus(const std::string& dir, const std::string& name, int n, uint64_t max_len,
                       uint64_t seed, std::vector<uint64_t>* lens = nullptr) {
  std::string prefix = dir + "/" + name;
  auto w = OpenTokenWriter("megatron:" + prefix);
  EXPECT_TRUE(w.ok());
  Rng r(seed);
  for (int d = 0; d < n; ++d) {
    uint64_t len = 1 + r.Below(max_len);
    std::vector<int64_t> ids(len);
    for (uint64_t t = 0; t < len; ++t) ids[t] = TokenOf(static_cast<uint64_t>(d), t);
    EXPECT_TRUE((*w)->AddDocument(ids).ok());
    if (lens) lens->push_back(len);
  }
  EXPECT_TRUE((*w)->Finish().ok());
  return "megatron:" + prefix;
}

TokenPipelineOptions Opts(std::vector<std::string> data, int64_t S, PackMode m) {
  TokenPipelineOptions o;
  o.data = std::move(data);
  o.index.seq_len = S;
  o.index.mode = m;
  o.index.seed = 42;
  o.index.cache_dir = "none";
  o.batch_size = 4;
  // The separate [B, S] input_ids / labels / position_ids layout; the window layout (the
  // default for concatenation) has its own tests below.
  o.window = false;
  o.position_ids = TokenPipelineOptions::PositionIds::kOn;
  return o;
}

template <typename T>
const T* As(const HostBuffer& v) {
  return static_cast<const T*>(v.data());
}
std::vector<uint8_t> Bytes(const HostBuffer& v) {
  const auto* p = static_cast<const uint8_t*>(v.data());
  return std::vector<uint8_t>(p, p + v.size());
}

// Checks every row of a batch against the corpus: input ids are the pieces' tokens, position
// ids restart at every cu_seqlens boundary, labels are the next token (concat) or the next
// token of the same document (packing).
void CheckBatch(const TokenBatch& b, PackMode mode, int64_t ignore) {
  const int64_t S = b.seq_len;
  const int32_t* in = As<int32_t>(b.input_ids);
  const int32_t* lab = As<int32_t>(b.labels);
  const int32_t* pos = As<int32_t>(b.position_ids);
  ASSERT_EQ(b.cu_seqlens.back(), b.batch_size * S);
  std::set<int64_t> starts(b.cu_seqlens.begin(), b.cu_seqlens.end());
  for (int64_t i = 0; i < b.batch_size * S; ++i) {
    bool start = starts.count(i) > 0;
    ASSERT_EQ(pos[i] == 0, start) << "flat position " << i;
    if (!start) {
      ASSERT_EQ(pos[i], pos[i - 1] + 1);
    }
  }
  for (size_t k = 0; k < b.pieces.size(); k += 5) {
    int64_t row = b.pieces[k], doc = b.pieces[k + 2], off = b.pieces[k + 3], len = b.pieces[k + 4];
    int64_t at = 0;  // where the piece starts in its row: after the earlier pieces of the row
    for (size_t q = 0; q < k; q += 5)
      if (b.pieces[q] == row) at += b.pieces[q + 4];
    for (int64_t t = 0; t < len; ++t) {
      ASSERT_EQ(in[row * S + at + t], TokenOf(doc, off + t)) << "row " << row << " doc " << doc;
      if (mode != PackMode::kConcat && t + 1 < len) {
        ASSERT_EQ(lab[row * S + at + t], TokenOf(doc, off + t + 1));
      }
    }
  }
  if (mode == PackMode::kConcat) {
    // Within a row, label i == input i + 1 (the next token of the stream, across document
    // boundaries, as Megatron); past the real tokens, ignore.
    for (int r = 0; r < b.batch_size; ++r) {
      int64_t real = 0;
      for (size_t k = 0; k < b.pieces.size(); k += 5)
        if (b.pieces[k] == r) real += b.pieces[k + 4];
      for (int64_t i = 0; i + 1 < real; ++i) ASSERT_EQ(lab[r * S + i], in[r * S + i + 1]);
      for (int64_t i = real; i < S; ++i) ASSERT_EQ(lab[r * S + i], ignore);
    }
  }
}

using Cover = std::map<uint64_t, std::vector<int>>;  // doc -> count per token

// Only the batch's metadata (the token buffers are move-only and not needed here).
struct Meta {
  std::vector<int64_t> pieces, sample_ids, epochs;
};
Meta MetaOf(const TokenBatch& b) { return {b.pieces, b.sample_ids, b.epochs}; }

void AddCover(const Meta& b, Cover* c, const std::vector<uint64_t>& lens) {
  for (size_t k = 0; k < b.pieces.size(); k += 5) {
    uint64_t doc = static_cast<uint64_t>(b.pieces[k + 2]);
    auto& v = (*c)[doc];
    if (v.empty()) v.assign(lens[doc], 0);
    for (int64_t t = 0; t < b.pieces[k + 4]; ++t) ++v[static_cast<size_t>(b.pieces[k + 3] + t)];
  }
}

TEST(TokenPipeline, ConcatEveryTokenOncePerEpoch) {
  std::string dir = testing::FreshDir("tp-concat");
  std::vector<uint64_t> lens;
  std::string c = MakeCorpus(dir, "c", 120, 200, 1, &lens);
  auto o = Opts({c}, 64, PackMode::kConcat);
  o.index.drop_last_partial = false;  // pad the last sample: all tokens are inputs
  auto p = TokenPipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  uint64_t T = 0;
  for (auto l : lens) T += l;
  ASSERT_EQ((*p)->samples_per_epoch(), (T + 63) / 64);
  Cover cover;
  uint64_t seen = 0;
  while (seen < (*p)->samples_per_epoch()) {
    auto b = (*p)->Next();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    CheckBatch(**b, PackMode::kConcat, -100);
    for (int r = 0; r < (*b)->batch_size && seen < (*p)->samples_per_epoch(); ++r, ++seen) {
      ASSERT_EQ((*b)->epochs[r], 0);
    }
    // Only the rows of epoch 0 count.
    Meta only = MetaOf(**b);
    std::vector<int64_t> keep;
    for (size_t k = 0; k < only.pieces.size(); k += 5)
      if (only.epochs[only.pieces[k]] == 0)
        keep.insert(keep.end(), only.pieces.begin() + k, only.pieces.begin() + k + 5);
    only.pieces = keep;
    AddCover(only, &cover, lens);
  }
  ASSERT_EQ(cover.size(), lens.size());
  for (auto& [doc, v] : cover)
    for (size_t t = 0; t < v.size(); ++t) ASSERT_EQ(v[t], 1) << "doc " << doc << " token " << t;
}

TEST(TokenPipeline, ConcatDropLastIsMegatronCount) {
  std::string dir = testing::FreshDir("tp-drop");
  std::vector<uint64_t> lens;
  std::string c = MakeCorpus(dir, "c", 50, 100, 2, &lens);
  auto o = Opts({c}, 32, PackMode::kConcat);
  auto p = TokenPipeline::Create(o);
  ASSERT_TRUE(p.ok());
  uint64_t T = 0;
  for (auto l : lens) T += l;
  EXPECT_EQ((*p)->samples_per_epoch(), (T - 1) / 32);  // Megatron: (T - 1) // S
  auto b = (*p)->Next();
  ASSERT_TRUE(b.ok());
  CheckBatch(**b, PackMode::kConcat, -100);
  EXPECT_EQ((*b)->pad_tokens, 0u);
  // Samples cross documents: some row has more than one piece.
  EXPECT_GT((*b)->pieces.size() / 5, static_cast<size_t>((*b)->batch_size));
}

class PackTest : public ::testing::TestWithParam<PackMode> {};

TEST_P(PackTest, NoSampleCrossesADocumentAndAllTokensOnce) {
  std::string dir = testing::FreshDir("tp-pack");
  std::vector<uint64_t> lens;
  std::string c = MakeCorpus(dir, "c", 150, 150, 3, &lens);  // some longer than S: cut
  auto o = Opts({c}, 100, GetParam());
  auto p = TokenPipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const uint64_t N = (*p)->samples_per_epoch();
  uint64_t T = 0;
  for (auto l : lens) T += l;
  ASSERT_GE(N * 100, T);
  Cover cover;
  uint64_t pad = 0, toks = 0;
  for (uint64_t s = 0; s < N; s += 4) {
    auto b = (*p)->Next();
    ASSERT_TRUE(b.ok());
    CheckBatch(**b, GetParam(), -100);
    const int32_t* lab = As<int32_t>((*b)->labels);
    for (size_t k = 0; k < (*b)->pieces.size(); k += 5) {
      int64_t row = (*b)->pieces[k], doc = (*b)->pieces[k + 2], off = (*b)->pieces[k + 3],
              len = (*b)->pieces[k + 4];
      ASSERT_LE(off + len, static_cast<int64_t>(lens[doc])) << "piece crosses its document";
      if (static_cast<uint64_t>(off + len) == lens[doc]) {
        int64_t at = 0;
        for (size_t q = 0; q < k; q += 5)
          if ((*b)->pieces[q] == row) at += (*b)->pieces[q + 4];
        ASSERT_EQ(lab[row * 100 + at + len - 1], -100) << "label past the document's end";
      }
    }
    Meta only = MetaOf(**b);
    std::vector<int64_t> keep;
    for (size_t k = 0; k < only.pieces.size(); k += 5)
      if (static_cast<uint64_t>(only.sample_ids[only.pieces[k]]) < N)
        keep.insert(keep.end(), only.pieces.begin() + k, only.pieces.begin() + k + 5);
    for (int r = 0; r < (*b)->batch_size; ++r)
      if (static_cast<uint64_t>((*b)->sample_ids[r]) < N) {
        for (size_t k = 0; k < (*b)->pieces.size(); k += 5)
          if ((*b)->pieces[k] == r) toks += (*b)->pieces[k + 4];
      }
    only.pieces = keep;
    AddCover(only, &cover, lens);
    pad += (*b)->pad_tokens;
  }
  EXPECT_EQ(toks, T);
  ASSERT_EQ(cover.size(), lens.size());
  for (auto& [doc, v] : cover)
    for (size_t t = 0; t < v.size(); ++t) ASSERT_EQ(v[t], 1) << "doc " << doc << " token " << t;
  auto ix = (*p)->Index(0, 0);
  ASSERT_TRUE(ix.ok());
  EXPECT_EQ((*ix)->pad_tokens(), N * 100 - T);
}

INSTANTIATE_TEST_SUITE_P(Modes, PackTest,
                         ::testing::Values(PackMode::kBestFit, PackMode::kFirstFit));

TEST(TokenPipeline, BestFitPacksTighterThanFirstFitInOrder) {
  std::string dir = testing::FreshDir("tp-bfd");
  std::string c = MakeCorpus(dir, "c", 400, 120, 4);
  auto bf = TokenPipeline::Create(Opts({c}, 128, PackMode::kBestFit));
  auto ff = TokenPipeline::Create(Opts({c}, 128, PackMode::kFirstFit));
  ASSERT_TRUE(bf.ok() && ff.ok());
  EXPECT_LE((*bf)->samples_per_epoch(), (*ff)->samples_per_epoch());
}

TEST(TokenPipeline, BlendProportionsFollowWeights) {
  std::string dir = testing::FreshDir("tp-blend");
  std::vector<std::string> data = {MakeCorpus(dir, "a", 40, 100, 5), MakeCorpus(dir, "b", 40, 100, 6),
                                   MakeCorpus(dir, "c", 40, 100, 7)};
  auto o = Opts(data, 16, PackMode::kConcat);
  o.weights = {5, 3, 2};
  o.batch_size = 10;
  auto p = TokenPipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<int> count(3, 0);
  int total = 0;
  for (int s = 0; s < 100; ++s) {
    auto b = (*p)->Next();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    std::set<int64_t> rows_seen;
    for (size_t k = 0; k < (*b)->pieces.size(); k += 5)
      if (rows_seen.insert((*b)->pieces[k]).second) ++count[(*b)->pieces[k + 1]];
    total += (*b)->batch_size;
  }
  // The rule keeps every prefix within one sample of its share.
  EXPECT_NEAR(count[0], 0.5 * total, 1.0);
  EXPECT_NEAR(count[1], 0.3 * total, 1.0);
  EXPECT_NEAR(count[2], 0.2 * total, 1.0);
  TokenState st = (*p)->state();
  EXPECT_EQ(st.samples_consumed, 1000u);
  EXPECT_EQ(st.blend_counts, (std::vector<uint64_t>{500, 300, 200}));
}

// Runs `steps` steps on every rank of `world`, starting from `state`; returns the new state
// and adds each delivered sample's (global id → pieces) to `seen`.
TokenState RunWorld(const TokenPipelineOptions& base, int world, int steps, const TokenState* state,
                    std::map<int64_t, std::vector<int64_t>>* seen) {
  TokenState out;
  for (int r = 0; r < world; ++r) {
    auto o = base;
    o.rank = r;
    o.world_size = world;
    auto p = TokenPipeline::Create(o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (state) EXPECT_TRUE((*p)->Restore(*state).ok());
    for (int s = 0; s < steps; ++s) {
      auto b = (*p)->Next();
      EXPECT_TRUE(b.ok());
      for (int row = 0; row < (*b)->batch_size; ++row) {
        std::vector<int64_t> pcs;
        for (size_t k = 0; k < (*b)->pieces.size(); k += 5)
          if ((*b)->pieces[k] == row)
            pcs.insert(pcs.end(), {(*b)->pieces[k + 1], (*b)->pieces[k + 2], (*b)->pieces[k + 3],
                                   (*b)->pieces[k + 4]});
        int64_t g = (*b)->sample_ids[row];
        EXPECT_EQ(seen->count(g), 0u) << "sample " << g << " delivered twice";
        (*seen)[g] = pcs;
      }
    }
    TokenState st = (*p)->state();
    if (r == 0) out = st;
    EXPECT_EQ(st.samples_consumed, out.samples_consumed) << "ranks disagree";
  }
  return out;
}

TEST(TokenPipeline, ElasticResume8To4To6) {
  std::string dir = testing::FreshDir("tp-elastic");
  std::vector<std::string> data = {MakeCorpus(dir, "a", 60, 80, 8), MakeCorpus(dir, "b", 30, 80, 9)};
  auto o = Opts(data, 24, PackMode::kBestFit);
  o.weights = {2, 1};
  o.batch_size = 2;
  // Reference: one rank, one run.
  std::map<int64_t, std::vector<int64_t>> ref, got;
  auto one = o;
  one.batch_size = 1;
  RunWorld(one, 1, 8 * 2 * 3 + 4 * 2 * 5 + 6 * 2 * 4, nullptr, &ref);
  TokenState s1 = RunWorld(o, 8, 3, nullptr, &got);
  EXPECT_EQ(s1.samples_consumed, 48u);
  TokenState s2 = RunWorld(o, 4, 5, &s1, &got);
  EXPECT_EQ(s2.samples_consumed, 88u);
  TokenState s3 = RunWorld(o, 6, 4, &s2, &got);
  EXPECT_EQ(s3.samples_consumed, 136u);
  // The same samples, with the same content, as the single uninterrupted run.
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_EQ(got, ref);
  // As a multiset of (corpus, document, offset): nothing repeated, nothing lost.
  std::multiset<std::tuple<int64_t, int64_t, int64_t>> a, b;
  for (auto& [g, p] : ref)
    for (size_t k = 0; k < p.size(); k += 4) a.insert({p[k], p[k + 1], p[k + 2]});
  for (auto& [g, p] : got)
    for (size_t k = 0; k < p.size(); k += 4) b.insert({p[k], p[k + 1], p[k + 2]});
  EXPECT_EQ(a, b);
}

TEST(TokenPipeline, ResumeChecksSeedAndConfig) {
  std::string dir = testing::FreshDir("tp-resume");
  std::string c = MakeCorpus(dir, "c", 50, 100, 10);
  auto o = Opts({c}, 32, PackMode::kConcat);
  auto p = TokenPipeline::Create(o);
  ASSERT_TRUE(p.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*p)->Next().ok());
  TokenState st = (*p)->state();
  auto o2 = o;
  o2.index.seed = 7;
  auto q = TokenPipeline::Create(o2);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE((*q)->Restore(st).ok());
  auto o3 = o;
  o3.index.seq_len = 16;
  auto r = TokenPipeline::Create(o3);
  ASSERT_TRUE(r.ok());
  Status bad = (*r)->Restore(st);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("config"), std::string::npos);
  // Megatron consumed_samples: the 4th batch of a fresh run.
  auto fresh = TokenPipeline::Create(o);
  ASSERT_TRUE((*fresh)->SeekSamples(12).ok());
  auto b1 = (*fresh)->Next();
  auto b2 = (*p)->Next();
  ASSERT_TRUE(b1.ok() && b2.ok());
  EXPECT_EQ(Bytes((*b1)->input_ids), Bytes((*b2)->input_ids));
  EXPECT_EQ((*b1)->sample_ids, (*b2)->sample_ids);
}

TEST(TokenPipeline, OutputDoesNotDependOnThreadsOrPrefetch) {
  std::string dir = testing::FreshDir("tp-threads");
  std::string c = MakeCorpus(dir, "c", 80, 300, 11);
  auto o = Opts({c}, 128, PackMode::kConcat);
  auto a = TokenPipeline::Create(o);
  o.threads = 3;
  o.prefetch = 5;
  o.int64_output = true;
  auto b = TokenPipeline::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 20; ++i) {
    auto x = (*a)->Next();
    auto y = (*b)->Next();
    ASSERT_TRUE(x.ok() && y.ok());
    ASSERT_EQ((*x)->pieces, (*y)->pieces);
    const int32_t* xi = As<int32_t>((*x)->input_ids);
    const int64_t* yi = As<int64_t>((*y)->input_ids);
    for (int k = 0; k < 4 * 128; ++k) ASSERT_EQ(xi[k], yi[k]);
  }
}

// Whoever assembles a batch (the threads, or Next() while it would wait) and however far
// ahead, the batches are the same, in the same order, and a resume in the middle of
// batches in flight continues the same stream. A slow consumer lets the threads go to sleep
// between batches (the wake-up path).
TEST(TokenPipeline, HandOffDoesNotChangeTheBatches) {
  std::string dir = testing::FreshDir("tp-handoff");
  std::string c = MakeCorpus(dir, "c", 200, 300, 12);
  auto base = Opts({c}, 96, PackMode::kConcat);
  base.window = true;
  base.position_ids = TokenPipelineOptions::PositionIds::kAuto;
  base.threads = 1;
  base.prefetch = 1;
  base.assemble_when_waiting = false;
  struct Seen {
    std::vector<int64_t> ids;
    std::vector<std::vector<int64_t>> pieces;
    std::vector<std::vector<uint8_t>> windows;
  };
  auto run = [](const TokenPipelineOptions& o, int n, bool slow, int restore_at) {
    Seen s;
    auto p = TokenPipeline::Create(o);
    EXPECT_TRUE(p.ok());
    for (int i = 0; i < n; ++i) {
      if (i == restore_at) {  // batches are in flight: they are dropped, the stream goes on
        TokenState st = (*p)->state();
        EXPECT_TRUE((*p)->Restore(st).ok());
      }
      auto b = (*p)->Next();
      EXPECT_TRUE(b.ok());
      if (!b.ok()) return s;
      s.ids.insert(s.ids.end(), (*b)->sample_ids.begin(), (*b)->sample_ids.end());
      s.pieces.push_back((*b)->pieces);
      s.windows.push_back(Bytes((*b)->window));
      if (slow) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    return s;
  };
  const int n = 40;
  Seen want = run(base, n, false, -1);
  ASSERT_EQ(want.ids.size(), 4u * n);
  for (int threads : {1, 2, 4}) {
    for (int prefetch : {1, 2, 5}) {
      for (bool help : {false, true}) {
        auto o = base;
        o.threads = threads;
        o.prefetch = prefetch;
        o.assemble_when_waiting = help;
        const bool slow = threads == 2 && prefetch == 2;
        Seen got = run(o, n, slow, prefetch == 5 ? 17 : -1);
        SCOPED_TRACE(::testing::Message() << threads << " threads, prefetch " << prefetch
                                        << (help ? ", helping" : "") << (slow ? ", slow" : ""));
        EXPECT_EQ(got.ids, want.ids);
        EXPECT_EQ(got.pieces, want.pieces);
        EXPECT_EQ(got.windows, want.windows);
      }
    }
  }
  // More threads than this machine has cores, a consumer that outruns them: threads are
  // preempted in the middle of batches, which Next() then takes over (how often depends on
  // the machine; the batches must not).
  auto o = base;
  o.threads = 6;
  o.prefetch = 4;
  o.assemble_when_waiting = true;
  auto many = TokenPipeline::Create(o);
  auto one = TokenPipeline::Create(base);
  ASSERT_TRUE(many.ok() && one.ok());
  for (int i = 0; i < 400; ++i) {
    auto x = (*many)->Next();
    auto y = (*one)->Next();
    ASSERT_TRUE(x.ok() && y.ok());
    ASSERT_EQ((*x)->sample_ids, (*y)->sample_ids);
    ASSERT_EQ(Bytes((*x)->window), Bytes((*y)->window));
  }
  const TokenPipelineStats st = (*many)->stats();
  EXPECT_EQ(st.batches, 400u);
  EXPECT_LE(st.taken_over, st.assembled_by_consumer);
  std::printf("6 threads, 400 batches: %llu assembled by Next(), %llu taken over\n",
              static_cast<unsigned long long>(st.assembled_by_consumer),
              static_cast<unsigned long long>(st.taken_over));
}

// The window layout (concatenation's default): one [B, S + 1] buffer, input_ids and labels
// are views of it (labels start one token later), no position_ids unless asked; the tokens
// are those of the separate layout, label for label.
TEST(TokenPipeline, WindowLayoutInputsAndLabelsAreViewsOfOneWindow) {
  std::string dir = testing::FreshDir("tp-window");
  std::vector<uint64_t> lens;
  std::string c = MakeCorpus(dir, "c", 90, 200, 21, &lens);
  const int64_t S = 64;
  for (bool drop : {true, false}) {
    auto sep = Opts({c}, S, PackMode::kConcat);
    sep.index.drop_last_partial = drop;
    auto win = sep;
    win.window = true;
    win.position_ids = TokenPipelineOptions::PositionIds::kAuto;
    auto a = TokenPipeline::Create(sep);
    auto w = TokenPipeline::Create(win);
    ASSERT_TRUE(a.ok() && w.ok());
    const uint64_t steps = (*w)->samples_per_epoch() / 4 + 2;  // past the epoch end
    for (uint64_t i = 0; i < steps; ++i) {
      auto x = (*a)->Next();
      auto y = (*w)->Next();
      ASSERT_TRUE(x.ok() && y.ok());
      const TokenBatch& bs = **x;
      const TokenBatch& bw = **y;
      ASSERT_TRUE(bw.windowed);
      ASSERT_FALSE(bw.has_position_ids);
      EXPECT_EQ(bw.position_ids.size(), 0u);
      EXPECT_EQ(bw.input_ids.size(), 0u);
      EXPECT_EQ(bw.labels.size(), 0u);
      ASSERT_EQ(bw.window.size(), 4u * (S + 1) * sizeof(int32_t));
      EXPECT_EQ(bw.token_bytes(), 4u * (S + 1) * sizeof(int32_t));  // not 3 * B * S * 4
      // Views: labels are the window one element later, rows S + 1 apart.
      ASSERT_EQ(bw.input_data(), static_cast<const uint8_t*>(bw.window.data()));
      ASSERT_EQ(bw.label_data(), bw.input_data() + sizeof(int32_t));
      ASSERT_EQ(bw.row_stride(), S + 1);
      ASSERT_EQ(bw.pieces, bs.pieces);
      ASSERT_EQ(bw.cu_seqlens, bs.cu_seqlens);
      ASSERT_EQ(bw.tokens, bs.tokens);
      ASSERT_EQ(bw.pad_tokens, bs.pad_tokens);
      const int32_t* win_in = reinterpret_cast<const int32_t*>(bw.input_data());
      const int32_t* win_lab = reinterpret_cast<const int32_t*>(bw.label_data());
      const int32_t* in = As<int32_t>(bs.input_ids);
      const int32_t* lab = As<int32_t>(bs.labels);
      for (int r = 0; r < 4; ++r) {
        for (int64_t t = 0; t < S; ++t) {
          ASSERT_EQ(win_in[r * (S + 1) + t], in[r * S + t]) << "row " << r << " pos " << t;
          // The separate layout's ignore_index marks labels past the real tokens; the
          // window holds pad_id there.
          int32_t want = lab[r * S + t] == -100 ? 0 : lab[r * S + t];
          ASSERT_EQ(win_lab[r * (S + 1) + t], want) << "row " << r << " pos " << t;
        }
        // Within the row, label i is input i + 1 (the same memory).
        for (int64_t t = 0; t + 1 < S; ++t)
          ASSERT_EQ(win_lab[r * (S + 1) + t], win_in[r * (S + 1) + t + 1]);
      }
      // The delivered tokens are the documents' own (pieces checked against the corpus).
      for (size_t k = 0; k < bw.pieces.size(); k += 5) {
        int64_t row = bw.pieces[k], doc = bw.pieces[k + 2], off = bw.pieces[k + 3];
        int64_t len = bw.pieces[k + 4], at = 0;
        for (size_t q = 0; q < k; q += 5)
          if (bw.pieces[q] == row) at += bw.pieces[q + 4];
        for (int64_t t = 0; t < len; ++t)
          ASSERT_EQ(win_in[row * (S + 1) + at + t], TokenOf(doc, off + t));
      }
    }
  }
}

TEST(TokenPipeline, WindowLayoutPositionIdsWhenAskedAndPackingKeepsSeparateArrays) {
  std::string dir = testing::FreshDir("tp-window-pos");
  std::string c = MakeCorpus(dir, "c", 60, 200, 22);
  auto sep = Opts({c}, 32, PackMode::kConcat);
  auto win = sep;
  win.window = true;  // position_ids stay kOn
  auto a = TokenPipeline::Create(sep);
  auto w = TokenPipeline::Create(win);
  ASSERT_TRUE(a.ok() && w.ok());
  for (int i = 0; i < 5; ++i) {
    auto x = (*a)->Next();
    auto y = (*w)->Next();
    ASSERT_TRUE(x.ok() && y.ok());
    ASSERT_TRUE((*y)->windowed && (*y)->has_position_ids);
    ASSERT_EQ(Bytes((*y)->position_ids), Bytes((*x)->position_ids));
  }
  // Packing: labels are ignore_index at a document's end, so not views; position ids on.
  auto pk = Opts({c}, 32, PackMode::kBestFit);
  pk.window = true;
  pk.position_ids = TokenPipelineOptions::PositionIds::kAuto;
  auto p = TokenPipeline::Create(pk);
  ASSERT_TRUE(p.ok());
  auto b = (*p)->Next();
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE((*b)->windowed);
  EXPECT_TRUE((*b)->has_position_ids);
  CheckBatch(**b, PackMode::kBestFit, -100);
}

TEST(TokenPipeline, IndexIsCachedBesideTheDataAndReused) {
  std::string dir = testing::FreshDir("tp-cache");
  std::string c = MakeCorpus(dir, "c", 80, 300, 12);
  auto o = Opts({c}, 64, PackMode::kBestFit);
  o.index.cache_dir = "";
  auto a = TokenPipeline::Create(o);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->stats().indices_built, 1u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/.stoker-index"));
  auto b = TokenPipeline::Create(o);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->stats().indices_cached, 1u);
  EXPECT_EQ((*b)->stats().indices_built, 0u);
  for (int i = 0; i < 5; ++i) {
    auto x = (*a)->Next();
    auto y = (*b)->Next();
    ASSERT_TRUE(x.ok() && y.ok());
    ASSERT_EQ(Bytes((*x)->input_ids), Bytes((*y)->input_ids));
  }
  // A damaged cache file is rebuilt, not trusted.
  for (auto& e : std::filesystem::directory_iterator(dir + "/.stoker-index"))
    std::filesystem::resize_file(e.path(), 100);
  auto d = TokenPipeline::Create(o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->stats().indices_built, 1u);
}

TEST(TokenPipeline, BadTokensAndEmptyDocuments) {
  std::string dir = testing::FreshDir("tp-bad");
  auto w = OpenTokenWriter("megatron:" + dir + "/c");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->AddDocument({1, 2, 3, 4}).ok());
  ASSERT_TRUE((*w)->AddDocument({}).ok());
  ASSERT_TRUE((*w)->AddDocument({5, 60000, 7, 8}).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto o = Opts({"megatron:" + dir + "/c"}, 2, PackMode::kConcat);
  o.index.shuffle = false;
  o.batch_size = 1;
  auto p = TokenPipeline::Create(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("c.bin: document 1 is empty"), std::string::npos)
      << p.status().ToString();
  o.index.skip_empty = true;
  o.vocab_size = 50257;
  p = TokenPipeline::Create(o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->stats().skipped_empty, 1u);
  Status bad;
  for (int i = 0; i < 4 && bad.ok(); ++i) bad = (*p)->Next().status();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("document 2"), std::string::npos) << bad.ToString();
  EXPECT_NE(bad.message().find("60000"), std::string::npos) << bad.ToString();
}

TEST(TokenPipeline, HeldOutSplitByDocument) {
  std::string dir = testing::FreshDir("tp-split");
  std::string c = MakeCorpus(dir, "c", 100, 50, 13);
  auto o = Opts({c}, 8, PackMode::kBestFit);
  o.index.split_end = 0.9;
  auto train = TokenPipeline::Create(o);
  o.index.split_begin = 0.9;
  o.index.split_end = 1.0;
  auto valid = TokenPipeline::Create(o);
  ASSERT_TRUE(train.ok() && valid.ok());
  std::set<int64_t> tdocs, vdocs;
  for (int i = 0; i < 30; ++i) {
    auto b = (*train)->Next();
    for (size_t k = 0; k < (*b)->pieces.size(); k += 5) tdocs.insert((*b)->pieces[k + 2]);
    auto v = (*valid)->Next();
    for (size_t k = 0; k < (*v)->pieces.size(); k += 5) vdocs.insert((*v)->pieces[k + 2]);
  }
  EXPECT_LT(*tdocs.rbegin(), 90);
  EXPECT_GE(*vdocs.begin(), 90);
}

// ---------------------------------------------------------------- lazy shuffles

TEST(TokenIndex, KeyedPermutationIsABijectionForEverySmallN) {
  for (uint64_t key : {uint64_t{0}, uint64_t{1}, uint64_t{42}, uint64_t{0x8000000000000005}}) {
    for (uint64_t n = 1; n <= 300; ++n) {
      KeyedPermutation p(n, key);
      std::vector<int> seen(n, 0);
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t v = p(i);
        ASSERT_LT(v, n) << "n " << n << " key " << key;
        ++seen[v];
      }
      for (uint64_t v = 0; v < n; ++v) ASSERT_EQ(seen[v], 1) << "n " << n << " value " << v;
      // The block form (AVX2 where available) is the same function, from any start.
      for (uint64_t first : {uint64_t{0}, n / 3}) {
        std::vector<uint32_t> blk(n - first);
        p.Block(first, n - first, blk.data());
        for (uint64_t i = first; i < n; ++i) ASSERT_EQ(blk[i - first], p(i)) << "n " << n;
      }
    }
  }
  KeyedPermutation id(10, 7, /*identity=*/true);
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(id(i), i);
}

TEST(TokenIndex, KeyedPermutationShufflesAndDependsOnTheKey) {
  // A large n, not a power of two (so cycle walking is exercised), checked exhaustively.
  const uint64_t n = (1u << 20) + 3;
  KeyedPermutation p(n, 99);
  std::vector<uint32_t> all(n);
  p.Block(0, n, all.data());
  std::vector<uint8_t> hit(n, 0);
  uint64_t fixed = 0, ascending = 0;
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_LT(all[i], n);
    ASSERT_EQ(hit[all[i]], 0) << "value " << all[i] << " twice";
    hit[all[i]] = 1;
    fixed += all[i] == i;
    if (i > 0) ascending += all[i] > all[i - 1];
  }
  EXPECT_LT(fixed, 30u);  // a random permutation has 1 on average
  // About half of the neighbours ascend in a shuffled order (not an identity or a shift).
  EXPECT_GT(ascending, n * 45 / 100);
  EXPECT_LT(ascending, n * 55 / 100);
  // Another key, another order; the same key, the same order.
  KeyedPermutation q(n, 100), p2(n, 99);
  uint64_t same = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    same += q(i) == p(i);
    ASSERT_EQ(p2(i), p(i));
  }
  EXPECT_LT(same, 10u);
  // Where index 0 goes is spread over [0, n) across keys (no bias to the start).
  uint64_t low = 0;
  for (uint64_t k = 0; k < 2000; ++k) low += KeyedPermutation(n, k)(0) < n / 2;
  EXPECT_GT(low, 900u);
  EXPECT_LT(low, 1100u);
}

// The lazy index against a direct reference: the document order DocAt is a permutation of
// the split's non-empty documents, the sample order a permutation of the samples, and
// sample k is tokens [kS, kS + S] of the documents concatenated in that order.
TEST(TokenIndex, LazyConcatIndexMatchesTheConcatenatedStream) {
  std::string dir = testing::FreshDir("ti-lazy");
  std::string spec = MakeCorpus(dir, "c", 157, 90, 21);
  auto store = OpenTokenStore(spec);
  ASSERT_TRUE(store.ok());
  for (bool drop : {true, false}) {
    for (int64_t S : {1, 7, 64, 200}) {
      TokenIndexOptions o;
      o.seq_len = S;
      o.seed = 5;
      o.drop_last_partial = drop;
      o.cache_dir = "none";
      o.split_begin = 0.1;  // documents [16, 157)
      auto docs = SelectDocuments(**store, o);
      ASSERT_TRUE(docs.ok());
      for (uint64_t epoch : {0, 1}) {
        auto ix = EpochIndex::Get(**store, *docs, o, epoch, /*salt=*/3);
        ASSERT_TRUE(ix.ok()) << ix.status().ToString();
        // The stream: (doc, offset) of every token in epoch order.
        std::vector<std::pair<uint64_t, uint64_t>> stream;
        std::set<uint64_t> order;
        for (uint64_t pos = 0; pos < docs->size(); ++pos) {
          uint64_t d = (*ix)->DocAt(pos);
          order.insert(d);
          for (uint64_t t = 0; t < (*store)->DocumentLength(d); ++t) stream.push_back({d, t});
        }
        ASSERT_EQ(order.size(), docs->size());
        EXPECT_EQ(*order.begin(), 16u);
        const uint64_t T = stream.size(), N = (*ix)->num_samples();
        EXPECT_EQ(N, drop ? (T - 1) / S : (T + S - 1) / S);
        std::set<uint64_t> ks;
        std::vector<Piece> pcs;
        for (uint64_t p = 0; p < N; ++p) {
          uint64_t k = (*ix)->Sample(p, &pcs);
          ks.insert(k);
          std::vector<std::pair<uint64_t, uint64_t>> got;
          for (const Piece& pc : pcs)
            for (uint64_t t = 0; t < pc.len; ++t) got.push_back({pc.doc, pc.offset + t});
          const uint64_t b = k * S, e = std::min<uint64_t>(T, b + S + 1);
          using Run = std::vector<std::pair<uint64_t, uint64_t>>;
          const Run want(stream.begin() + static_cast<int64_t>(b),
                         stream.begin() + static_cast<int64_t>(e));
          ASSERT_EQ(got, want) << "S " << S << " sample " << k;
        }
        EXPECT_EQ(ks.size(), N);
      }
    }
  }
}

// Many documents (more than a few blocks of the build): every sample starts at token k*S of
// the epoch's stream, by a sweep.
TEST(TokenIndex, ConcatIndexMatchesASweepOfTheStreamOnManyDocuments) {
  std::string dir = testing::FreshDir("ti-many");
  std::string spec = MakeCorpus(dir, "c", 150000, 9, 31);
  auto store = OpenTokenStore(spec);
  ASSERT_TRUE(store.ok());
  for (bool drop : {true, false}) {
    TokenIndexOptions o;
    o.seq_len = 37;
    o.seed = 8;
    o.drop_last_partial = drop;
    o.cache_dir = "none";
    auto docs = SelectDocuments(**store, o);
    ASSERT_TRUE(docs.ok());
    auto ix = EpochIndex::Get(**store, *docs, o, 1, 0);
    ASSERT_TRUE(ix.ok()) << ix.status().ToString();
    const uint64_t T = docs->tokens, S = 37, N = (*ix)->num_samples();
    ASSERT_EQ(N, drop ? (T - 1) / S : (T + S - 1) / S);
    // Where token k*S is in the epoch's stream: (document, offset).
    std::vector<std::pair<uint64_t, uint64_t>> want(N, {~uint64_t{0}, 0});
    uint64_t base = 0, k = 0;
    for (uint64_t pos = 0; pos < docs->size() && k < N; ++pos) {
      const uint64_t d = (*ix)->DocAt(pos), end = base + (*store)->DocumentLength(d);
      for (; k < N && k * S < end; ++k) want[k] = {d, k * S - base};
      base = end;
    }
    std::vector<Piece> pcs;
    for (uint64_t p = 0; p < N; ++p) {
      const uint64_t kk = (*ix)->Sample(p, &pcs);
      ASSERT_FALSE(pcs.empty());
      ASSERT_EQ(std::make_pair(pcs[0].doc, pcs[0].offset), want[kk]) << "sample " << kk;
      uint64_t len = 0;
      for (const Piece& pc : pcs) len += pc.len;
      ASSERT_EQ(len, std::min<uint64_t>(S + 1, T - kk * S));
    }
  }
}

// The build's length table holds 16 bits a document; documents of 65535 tokens or more are
// looked up exactly.
TEST(TokenIndex, DocumentsOf65535TokensOrMoreAreCountedExactly) {
  std::string dir = testing::FreshDir("ti-long");
  // 40 documents, so that the table's vector fill (16 at a time) meets long ones too.
  std::vector<uint64_t> lens = {70000, 3, 65535, 65534, 100000, 5, 65536, 1, 2, 131071};
  for (uint64_t d = 10; d < 40; ++d)
    lens.push_back(d % 7 == 0 ? 65535 + d : d % 5 == 0 ? 65535 : d);
  auto w = OpenTokenWriter("megatron:" + dir + "/c");
  ASSERT_TRUE(w.ok());
  for (uint64_t d = 0; d < lens.size(); ++d) {
    std::vector<int64_t> ids(lens[d]);
    for (uint64_t t = 0; t < lens[d]; ++t) ids[t] = TokenOf(d, t);
    ASSERT_TRUE((*w)->AddDocument(ids).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  auto store = OpenTokenStore("megatron:" + dir + "/c");
  ASSERT_TRUE(store.ok());
  for (PackMode mode : {PackMode::kConcat, PackMode::kBestFit}) {
    TokenIndexOptions o;
    o.seq_len = 4096;
    o.seed = 3;
    o.mode = mode;
    o.cache_dir = "none";
    auto docs = SelectDocuments(**store, o);
    ASSERT_TRUE(docs.ok());
    auto ix = EpochIndex::Get(**store, *docs, o, 0, 0);
    ASSERT_TRUE(ix.ok()) << ix.status().ToString();
    std::map<uint64_t, uint64_t> seen;  // doc -> tokens delivered (drop_last: all but < S + 1)
    uint64_t total = 0;
    std::vector<Piece> pcs;
    for (uint64_t p = 0; p < (*ix)->num_samples(); ++p) {
      (*ix)->Sample(p, &pcs);
      for (const Piece& pc : pcs) {
        ASSERT_LE(pc.offset + pc.len, lens[pc.doc]);
        if (mode != PackMode::kConcat) seen[pc.doc] += pc.len;
        total += pc.len;
      }
    }
    const uint64_t T = docs->tokens;
    if (mode == PackMode::kConcat) {
      EXPECT_EQ((*ix)->num_samples(), (T - 1) / 4096);
      EXPECT_EQ(total, (*ix)->num_samples() * 4097);
      // Every sample starts at token k * 4096 of the stream (a sweep with the exact lengths).
      std::vector<std::pair<uint64_t, uint64_t>> want;
      uint64_t base = 0;
      for (uint64_t pos = 0; pos < docs->size(); ++pos) {
        const uint64_t d = (*ix)->DocAt(pos);
        for (uint64_t k = (base + 4095) / 4096; k * 4096 < base + lens[d]; ++k)
          want.push_back({d, k * 4096 - base});
        base += lens[d];
      }
      for (uint64_t p = 0; p < (*ix)->num_samples(); ++p) {
        const uint64_t k = (*ix)->Sample(p, &pcs);
        ASSERT_EQ(std::make_pair(pcs[0].doc, pcs[0].offset), want[k]) << "sample " << k;
      }
    } else {
      for (uint64_t d = 0; d < lens.size(); ++d) EXPECT_EQ(seen[d], lens[d]) << "document " << d;
    }
  }
}

// The samples of a given seed do not depend on how the index is built: fingerprints of the
// document order, of every sample's pieces and of the sample order, recorded with the build
// of 2026-12-06 (one fused pass into memory, then the cache file written) and checked for
// the in-memory build, the build streamed into the cache file, and the reloaded file.
uint64_t Fnv(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return h;
}

// The document order, then every sample's (unshuffled index, pieces) in shuffled order.
uint64_t Fingerprint(const EpochIndex& ix, const CorpusDocs& docs) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t pos = 0; pos < docs.size(); ++pos) h = Fnv(h, ix.DocAt(pos));
  std::vector<Piece> pcs;
  for (uint64_t p = 0; p < ix.num_samples(); ++p) {
    h = Fnv(h, ix.Sample(p, &pcs));
    for (const Piece& pc : pcs) h = Fnv(Fnv(Fnv(h, pc.doc), pc.offset), pc.len);
  }
  return h;
}

constexpr uint64_t kPinnedS64 = 16124420960222462178ull;  // the corpus below, S = 64, drop

std::string PinnedCorpus(const std::string& dir) {
  // 40,000 documents of 1..600 tokens: many build blocks, cycle walking, documents holding
  // several sample starts (S = 64) and none (S = 1000); at S = 64 the index (1.5 MB) is
  // more than one window of the streamed cache write.
  return MakeCorpus(dir, "c", 40000, 600, 77);
}

TokenIndexOptions PinnedOptions(int64_t S, bool drop, const std::string& cache) {
  TokenIndexOptions o;
  o.seq_len = S;
  o.seed = 1234;
  o.drop_last_partial = drop;
  o.cache_dir = cache;
  return o;
}

TEST(TokenIndex, SamplesOfAGivenSeedArePinned) {
  std::string dir = testing::FreshDir("ti-pinned");
  auto store = OpenTokenStore(PinnedCorpus(dir));
  ASSERT_TRUE(store.ok());
  struct Want {
    int64_t S;
    bool drop;
    uint64_t fp;
  };
  const Want wants[] = {{64, true, kPinnedS64},
                        {1000, true, 13770946124417946802ull},
                        {1000, false, 17314535403302121230ull}};
  for (const Want& w : wants) {
    for (const std::string& cache : {std::string("none"), dir + "/cache"}) {
      for (int again = 0; again < (cache == "none" ? 1 : 2); ++again) {
        const TokenIndexOptions o = PinnedOptions(w.S, w.drop, cache);
        auto docs = SelectDocuments(**store, o);
        ASSERT_TRUE(docs.ok());
        auto ix = EpochIndex::Get(**store, *docs, o, 2, 1);
        ASSERT_TRUE(ix.ok()) << ix.status().ToString();
        EXPECT_EQ((*ix)->info().from_cache, again == 1);
        EXPECT_EQ((*ix)->info().cache_path.empty(), cache == "none");
        EXPECT_EQ(Fingerprint(**ix, *docs), w.fp)
            << "S " << w.S << " drop " << w.drop << " cache " << cache
            << (again ? " (reloaded)" : "");
      }
    }
  }
  // The permutation itself, on a corpus-sized n (not a power of two) and a small one.
  for (uint64_t n : {uint64_t{1948596}, uint64_t{1000}}) {
    KeyedPermutation p(n, 0x5eed + n);
    std::vector<uint32_t> all(n);
    p.Block(0, n, all.data());
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t v : all) h = Fnv(h, v);
    EXPECT_EQ(h, n == 1000 ? 13554110502833960537ull : 672867380825760229ull) << "n " << n;
  }
}

// A file writer that fails once `ok_bytes` have been appended (a disk that fills up).
class FailingWriteEnv : public EnvWrapper {
 public:
  explicit FailingWriteEnv(uint64_t ok_bytes) : EnvWrapper(Env::Default()), ok_(ok_bytes) {}
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    auto f = EnvWrapper::NewWritableFile(path);
    if (!f.ok()) return f.status();
    return std::unique_ptr<WritableFile>(new Writer(std::move(f).value(), ok_));
  }

 private:
  class Writer final : public WritableFile {
   public:
    Writer(std::unique_ptr<WritableFile> f, uint64_t ok) : f_(std::move(f)), left_(ok) {}
    Status Append(const void* data, size_t n) override {
      if (n > left_) return IOError("{}: no space left on device", f_->path());
      left_ -= n;
      return f_->Append(data, n);
    }
    Status Flush() override { return f_->Flush(); }
    Status Sync() override { return f_->Sync(); }
    Status Close() override { return f_->Close(); }
    uint64_t bytes_written() const override { return f_->bytes_written(); }
    const std::string& path() const override { return f_->path(); }

   private:
    std::unique_ptr<WritableFile> f_;
    uint64_t left_;
  };
  uint64_t ok_;
};

// The concat index is written into the cache file as it is built; when that fails (a full
// disk in the middle, or a cache folder that cannot be made) the build still succeeds, in
// memory, with the same samples, and leaves no file behind.
TEST(TokenIndex, AFailedCacheWriteFallsBackToMemory) {
  std::string dir = testing::FreshDir("ti-cachefail");
  auto store = OpenTokenStore(PinnedCorpus(dir));
  ASSERT_TRUE(store.ok());
  // Failing at the header, at the first window (1.25 MiB) and at the last.
  for (uint64_t ok_bytes : {uint64_t{0}, uint64_t{64}, uint64_t{1400} << 10}) {
    FailingWriteEnv env(ok_bytes);
    const TokenIndexOptions o = PinnedOptions(64, true, dir + "/cache");
    auto docs = SelectDocuments(**store, o);
    ASSERT_TRUE(docs.ok());
    auto ix = EpochIndex::Get(**store, *docs, o, 2, 1, &env);
    ASSERT_TRUE(ix.ok()) << ix.status().ToString();
    EXPECT_TRUE((*ix)->info().cache_path.empty()) << ok_bytes;
    EXPECT_EQ(Fingerprint(**ix, *docs), kPinnedS64) << ok_bytes;
    auto left = Env::Default()->ListDir(dir + "/cache");
    ASSERT_TRUE(left.ok());
    EXPECT_TRUE(left->empty()) << ok_bytes << ": " << (left->empty() ? "" : (*left)[0].name);
  }
  // A cache folder that cannot be created (a file is in the way).
  std::ofstream(dir + "/blocker") << "x";
  const TokenIndexOptions o = PinnedOptions(64, true, dir + "/blocker/cache");
  auto docs = SelectDocuments(**store, o);
  ASSERT_TRUE(docs.ok());
  auto ix = EpochIndex::Get(**store, *docs, o, 2, 1);
  ASSERT_TRUE(ix.ok()) << ix.status().ToString();
  EXPECT_TRUE((*ix)->info().cache_path.empty());
  EXPECT_EQ(Fingerprint(**ix, *docs), kPinnedS64);
}

// Ranks (here threads) that build the same index at once into one cache folder each write
// their own temporary file and map it: every one gets the right samples, and the file left
// behind serves them too.
TEST(TokenIndex, ConcurrentBuildsOfOneIndexEachGetTheRightSamples) {
  std::string dir = testing::FreshDir("ti-concurrent");
  auto store = OpenTokenStore(PinnedCorpus(dir));
  ASSERT_TRUE(store.ok());
  const TokenIndexOptions o = PinnedOptions(64, true, dir + "/cache");
  auto docs = SelectDocuments(**store, o);
  ASSERT_TRUE(docs.ok());
  std::vector<uint64_t> fps(4, 0);
  std::vector<std::thread> ts;
  for (size_t t = 0; t < fps.size(); ++t)
    ts.emplace_back([&, t] {
      auto ix = EpochIndex::Get(**store, *docs, o, 2, 1);
      if (ix.ok()) fps[t] = Fingerprint(**ix, *docs);
    });
  for (auto& t : ts) t.join();
  for (uint64_t fp : fps) EXPECT_EQ(fp, kPinnedS64);
  auto again = EpochIndex::Get(**store, *docs, o, 2, 1);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->info().from_cache);
  EXPECT_EQ(Fingerprint(**again, *docs), kPinnedS64);
  auto left = Env::Default()->ListDir(dir + "/cache");
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->size(), 1u);  // no temporary file left
}

TEST(TokenIndex, EpochsAndSeedsShuffleDifferentlyAndTheCacheServesTheSameIndex) {
  std::string dir = testing::FreshDir("ti-cache");
  std::string spec = MakeCorpus(dir, "c", 300, 60, 22);
  auto store = OpenTokenStore(spec);
  ASSERT_TRUE(store.ok());
  TokenIndexOptions o;
  o.seq_len = 16;
  o.seed = 9;
  o.cache_dir = dir + "/cache";
  auto docs = SelectDocuments(**store, o);
  ASSERT_TRUE(docs.ok());
  auto order = [&](const EpochIndex& ix) {
    std::vector<uint64_t> v;
    for (uint64_t pos = 0; pos < docs->size(); ++pos) v.push_back(ix.DocAt(pos));
    return v;
  };
  auto samples = [&](const EpochIndex& ix) {
    std::vector<uint64_t> v;
    std::vector<Piece> pcs;
    for (uint64_t p = 0; p < ix.num_samples(); ++p) {
      v.push_back(ix.Sample(p, &pcs));
      for (const Piece& pc : pcs) v.insert(v.end(), {pc.doc, pc.offset, pc.len});
    }
    return v;
  };
  auto e0 = EpochIndex::Get(**store, *docs, o, 0, 0);
  auto e1 = EpochIndex::Get(**store, *docs, o, 1, 0);
  ASSERT_TRUE(e0.ok() && e1.ok());
  EXPECT_FALSE((*e0)->info().from_cache);
  EXPECT_NE(order(**e0), order(**e1));
  // Reloaded from the cache file: the same documents and samples.
  auto again = EpochIndex::Get(**store, *docs, o, 0, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->info().from_cache);
  EXPECT_EQ(order(**again), order(**e0));
  EXPECT_EQ(samples(**again), samples(**e0));
  auto o2 = o;
  o2.seed = 10;
  auto s2 = EpochIndex::Get(**store, *docs, o2, 0, 0);
  ASSERT_TRUE(s2.ok());
  EXPECT_FALSE((*s2)->info().from_cache);
  EXPECT_NE(order(**s2), order(**e0));
  // Unshuffled: documents and samples in corpus order.
  auto o3 = o;
  o3.shuffle = false;
  auto u = EpochIndex::Get(**store, *docs, o3, 0, 0);
  ASSERT_TRUE(u.ok());
  std::vector<uint64_t> ident(docs->size());
  for (uint64_t i = 0; i < ident.size(); ++i) ident[i] = i;
  EXPECT_EQ(order(**u), ident);
  std::vector<Piece> pcs;
  for (uint64_t p = 0; p < 20; ++p) EXPECT_EQ((*u)->Sample(p, &pcs), p);
}

TEST(TokenPipeline, ConcatStreamIsTheSameOnEveryWorldSize) {
  std::string dir = testing::FreshDir("tp-world");
  std::string c = MakeCorpus(dir, "c", 120, 100, 23);
  auto o = Opts({c}, 16, PackMode::kConcat);
  o.batch_size = 2;
  std::map<int64_t, std::vector<int64_t>> w1, w3, w4;
  RunWorld(o, 1, 24, nullptr, &w1);
  RunWorld(o, 3, 8, nullptr, &w3);
  RunWorld(o, 4, 6, nullptr, &w4);
  ASSERT_EQ(w1.size(), 48u);
  EXPECT_EQ(w1, w3);
  EXPECT_EQ(w1, w4);
}

}  // namespace
}  // namespace stoker::tokens
