#include "pipeline/plan.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace stoker {
namespace {

std::vector<ShardInfo> Shards(std::vector<uint64_t> sizes) {
  std::vector<ShardInfo> out;
  uint64_t b = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.push_back({"s" + std::to_string(i), b, b + sizes[i]});
    b += sizes[i];
  }
  return out;
}

TEST(PlanEpoch, GlobalOrderIsAPermutationAndChangesPerEpoch) {
  auto shards = Shards({100, 100, 57, 100});
  EpochPlanOptions o;
  o.seed = 7;
  o.shuffle_buffer = 64;
  auto e0 = GlobalOrder(shards, 357, 0, o);
  auto e1 = GlobalOrder(shards, 357, 1, o);
  ASSERT_EQ(e0.size(), 357u);
  std::vector<uint64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < 357; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, GlobalOrder(shards, 357, 0, o));  // pure function
  o.seed = 8;
  EXPECT_NE(e0, GlobalOrder(shards, 357, 0, o));
}

TEST(PlanEpoch, ShuffleBufferKeepsLocality) {
  // With a buffer of 16, the first outputs come from the first shard read.
  auto shards = Shards({1000, 1000, 1000, 1000});
  EpochPlanOptions o;
  o.shuffle_buffer = 16;
  auto order = GlobalOrder(shards, 4000, 0, o);
  std::set<uint64_t> first_shards;
  for (int i = 0; i < 100; ++i) first_shards.insert(order[i] / 1000);
  EXPECT_EQ(first_shards.size(), 1u);
}

TEST(PlanEpoch, NoShuffleIsIdentity) {
  EpochPlanOptions o;
  o.shuffle = false;
  auto order = GlobalOrder(Shards({5, 5}), 10, 3, o);
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(order[i], i);
}

TEST(PlanEpoch, InterleaveReadsShardsSideBySideAsTfData) {
  // tf.data's interleave(cycle_length=2, block_length=2) over shards of 5, 3 and 4: two
  // samples of each in turn; shard 1 ends first and shard 2 takes its place; the shards
  // in sequence (shard order), each in its own order.
  EpochPlanOptions o;
  o.shuffle = false;
  o.interleave = 2;
  o.interleave_cycle = 2;
  EXPECT_EQ(GlobalOrder(Shards({5, 3, 4}), 12, 0, o),
            (std::vector<uint64_t>{0, 1, 5, 6, 2, 3, 7, 4, 8, 9, 10, 11}));
  // A cycle as wide as the shards, runs of 3; an empty shard is passed over.
  o.interleave = 3;
  o.interleave_cycle = 8;
  EXPECT_EQ(GlobalOrder(Shards({4, 0, 5}), 9, 0, o),
            (std::vector<uint64_t>{0, 1, 2, 4, 5, 6, 3, 7, 8}));
  // interleave 0, or a cycle of 1: one shard after another.
  o.interleave_cycle = 1;
  EXPECT_EQ(GlobalOrder(Shards({4, 0, 5}), 9, 0, o),
            (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(ShardsSideBySide(o), 1u);
}

TEST(PlanEpoch, InterleavedShuffleIsAPermutationThatMixesTheCycleEarly) {
  // Shuffled: the shard order is shuffled, the cycle's shards interleaved and the sequence
  // goes through the buffer; with a buffer of 16, the first outputs come from all four
  // shards of the cycle at once (one shard without interleave: ShuffleBufferKeepsLocality).
  auto shards = Shards({1000, 1000, 1000, 1000});
  EpochPlanOptions o;
  o.shuffle_buffer = 16;
  o.interleave = 4;
  o.interleave_cycle = 4;
  auto order = GlobalOrder(shards, 4000, 0, o);
  std::vector<uint64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < 4000; ++i) ASSERT_EQ(sorted[i], i);
  std::set<uint64_t> first_shards;
  for (int i = 0; i < 100; ++i) first_shards.insert(order[i] / 1000);
  EXPECT_EQ(first_shards.size(), 4u);
  EXPECT_EQ(order, GlobalOrder(shards, 4000, 0, o));
  EXPECT_NE(order, GlobalOrder(shards, 4000, 1, o));
  // Ranks still split it by stride, whatever the world size.
  for (int w : {2, 3}) {
    std::set<uint64_t> all;
    for (int rank = 0; rank < w; ++rank) {
      EpochPlanOptions r = o;
      r.rank = rank;
      r.world_size = w;
      r.balance = RankBalance::kDrop;
      auto mine = PlanEpoch(shards, 4000, 0, r);
      ASSERT_TRUE(mine.ok());
      for (size_t j = 0; j < mine->size(); ++j) ASSERT_EQ((*mine)[j], order[j * w + rank]);
      all.insert(mine->begin(), mine->end());
    }
    EXPECT_EQ(all.size(), 4000u / w * w);
  }
}

class RankSplit : public ::testing::TestWithParam<std::tuple<int, RankBalance>> {};

TEST_P(RankSplit, DisjointEqualAndCovering) {
  auto [world, balance] = GetParam();
  const uint64_t n = 1001;
  auto shards = Shards({300, 300, 401});
  std::vector<uint64_t> all;
  uint64_t per = SamplesPerRank(n, world, balance);
  for (int r = 0; r < world; ++r) {
    EpochPlanOptions o;
    o.seed = 3;
    o.rank = r;
    o.world_size = world;
    o.balance = balance;
    auto mine = PlanEpoch(shards, n, 2, o);
    ASSERT_TRUE(mine.ok()) << mine.status().ToString();
    EXPECT_EQ(mine->size(), per) << "rank " << r;
    all.insert(all.end(), mine->begin(), mine->end());
  }
  std::set<uint64_t> uniq(all.begin(), all.end());
  if (balance == RankBalance::kDrop) {
    EXPECT_EQ(uniq.size(), all.size()) << "ranks overlap";
    EXPECT_EQ(all.size(), n - n % world);
  } else {
    EXPECT_EQ(uniq.size(), n) << "pad must cover every sample";
    EXPECT_EQ(all.size() - uniq.size(), per * world - n) << "pad repeats only what it must";
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, RankSplit,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values(RankBalance::kPad,
                                                              RankBalance::kDrop)));

TEST(PlanEpoch, RejectsBadRanks) {
  EpochPlanOptions o;
  o.rank = 3;
  o.world_size = 3;
  EXPECT_FALSE(PlanEpoch(Shards({10}), 10, 0, o).ok());
  o.rank = 0;
  o.world_size = 20;
  o.balance = RankBalance::kDrop;
  auto r = PlanEpoch(Shards({10}), 10, 0, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fewer than the world size"), std::string::npos);
}

TEST(ResolveRank, FromEnvironment) {
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  auto r = ResolveRank(-1, -1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rank, 2);
  EXPECT_EQ(r->world_size, 4);
  EXPECT_EQ(r->source, "RANK/WORLD_SIZE");
  setenv("RANK", "9", 1);
  EXPECT_FALSE(ResolveRank(-1, -1).ok());
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "3", 1);
  r = ResolveRank(-1, -1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->source, "SLURM_*");
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
  r = ResolveRank(-1, -1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->world_size, 1);
  EXPECT_FALSE(ResolveRank(0, -1).ok());  // half given
}

// Elastic resume, simulated in one process: W ranks each take `k` samples, the state keeps
// the global position, W' ranks take the rest. Checked as a multiset of indices.
struct Resumed {
  std::multiset<uint64_t> all;
  uint64_t per_rank_after = 0;
};

Resumed ResumeAcross(uint64_t n, int w, int w2, uint64_t k, RankBalance balance, int epoch = 1) {
  auto shards = Shards({n / 3, n / 3, n - 2 * (n / 3)});
  Resumed r;
  uint64_t consumed = 0;
  for (int rank = 0; rank < w; ++rank) {
    EpochPlanOptions o;
    o.seed = 11;
    o.shuffle_buffer = 32;
    o.rank = rank;
    o.world_size = w;
    o.balance = balance;
    auto mine = PlanEpoch(shards, n, epoch, o);
    EXPECT_TRUE(mine.ok());
    for (uint64_t j = 0; j < k; ++j) r.all.insert((*mine)[j]);
    uint64_t c = ConsumedAfter(n, w, 0, k);
    if (rank > 0) EXPECT_EQ(c, consumed);  // every rank computes the same position
    consumed = c;
  }
  std::vector<uint64_t> sizes;
  for (int rank = 0; rank < w2; ++rank) {
    EpochPlanOptions o;
    o.seed = 11;
    o.shuffle_buffer = 32;
    o.rank = rank;
    o.world_size = w2;
    o.balance = balance;
    auto rest = PlanEpoch(shards, n, epoch, o, consumed);
    EXPECT_TRUE(rest.ok());
    sizes.push_back(rest->size());
    r.all.insert(rest->begin(), rest->end());
  }
  for (uint64_t s : sizes) EXPECT_EQ(s, sizes[0]) << "ranks must get equal shares";
  r.per_rank_after = sizes[0];
  return r;
}

TEST(ElasticResume, NoSampleLostOrRepeatedAcrossWorldSizes) {
  struct Case {
    int w, w2;
    uint64_t n, k;
  };
  // n divisible by both world sizes' shares: the epoch is delivered exactly once.
  for (Case c : {Case{8, 4, 960, 40}, Case{4, 6, 960, 36}, Case{2, 1, 960, 100},
                 Case{1, 3, 960, 0}, Case{3, 3, 960, 320}}) {
    for (RankBalance b : {RankBalance::kPad, RankBalance::kDrop}) {
      Resumed r = ResumeAcross(c.n, c.w, c.w2, c.k, b);
      std::multiset<uint64_t> want;
      for (uint64_t i = 0; i < c.n; ++i) want.insert(i);
      EXPECT_EQ(r.all, want) << c.w << " -> " << c.w2 << " after " << c.k;
    }
  }
}

TEST(ElasticResume, TheTailFollowsTheBalanceRule) {
  // 1001 samples, 8 ranks took 30 each (240 consumed), 6 ranks share the 761 left:
  // pad gives 127 each (762: one sample repeated from the epoch's start), drop 126 each
  // (756: the last 5 positions left out). Nothing else is lost or repeated.
  const uint64_t n = 1001;
  Resumed pad = ResumeAcross(n, 8, 6, 30, RankBalance::kPad);
  EXPECT_EQ(pad.per_rank_after, 127u);
  EXPECT_EQ(pad.all.size(), 240u + 762u);
  std::set<uint64_t> uniq(pad.all.begin(), pad.all.end());
  EXPECT_EQ(uniq.size(), n);
  Resumed drop = ResumeAcross(n, 8, 6, 30, RankBalance::kDrop);
  EXPECT_EQ(drop.per_rank_after, 126u);
  EXPECT_EQ(drop.all.size(), 240u + 756u);
  std::set<uint64_t> u2(drop.all.begin(), drop.all.end());
  EXPECT_EQ(u2.size(), drop.all.size()) << "drop never repeats";
}

TEST(ElasticResume, SameWorldSizeResumeIsTheOriginalPlan) {
  auto shards = Shards({40, 60});
  for (int w : {1, 2, 3}) {
    for (int rank = 0; rank < w; ++rank) {
      EpochPlanOptions o;
      o.seed = 5;
      o.rank = rank;
      o.world_size = w;
      auto full = PlanEpoch(shards, 100, 0, o);
      auto rest = PlanEpoch(shards, 100, 0, o, ConsumedAfter(100, w, 0, 7));
      ASSERT_TRUE(full.ok() && rest.ok());
      std::vector<uint64_t> tail(full->begin() + 7, full->end());
      EXPECT_EQ(*rest, tail) << "world " << w << " rank " << rank;
    }
  }
  EpochPlanOptions o;
  EXPECT_TRUE(PlanEpoch(shards, 100, 0, o, 100)->empty());  // nothing left
}

TEST(ElasticResume, TheGlobalOrderDoesNotDependOnTheWorldSize) {
  // Strided split: rank r's j-th sample is global position j*W + r.
  auto shards = Shards({50, 50});
  EpochPlanOptions g;
  g.seed = 2;
  auto global = GlobalOrder(shards, 100, 4, g);
  for (int w : {1, 4, 5}) {
    for (int rank = 0; rank < w; ++rank) {
      EpochPlanOptions o = g;
      o.rank = rank;
      o.world_size = w;
      auto mine = PlanEpoch(shards, 100, 4, o);
      ASSERT_TRUE(mine.ok());
      for (size_t j = 0; j < mine->size(); ++j)
        EXPECT_EQ((*mine)[j], global[(j * w + rank) % 100]);
    }
  }
}

}  // namespace
}  // namespace stoker

