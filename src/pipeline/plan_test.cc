#include "pipeline/plan.h"

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

}  // namespace
}  // namespace stoker
