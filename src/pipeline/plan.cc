#include "pipeline/plan.h"

#include <cstdint>
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <numeric>

#include "core/random.h"

namespace stoker {

uint64_t SamplesPerRank(uint64_t n, int world_size, RankBalance balance) {
  uint64_t w = static_cast<uint64_t>(world_size < 1 ? 1 : world_size);
  return balance == RankBalance::kDrop ? n / w : (n + w - 1) / w;
}

std::vector<size_t> ShardOrder(const std::vector<ShardInfo>& shards, uint64_t n, int epoch,
                               const EpochPlanOptions& o) {
  if (o.shuffle && (o.global_shuffle || (shards.size() <= 1 && o.shuffle_buffer >= n))) return {};
  std::vector<size_t> sorder(shards.size());
  std::iota(sorder.begin(), sorder.end(), 0);
  if (!o.shuffle) return sorder;
  Rng srng(o.seed, static_cast<uint64_t>(epoch), 0, kStreamShardOrder);
  for (size_t i = sorder.size(); i > 1; --i) std::swap(sorder[i - 1], sorder[srng.Below(i)]);
  return sorder;
}

size_t ShardsSideBySide(const EpochPlanOptions& o) {
  return o.interleave > 0 && o.interleave_cycle > 1 ? o.interleave_cycle : 1;
}

namespace {

// Calls f(i) for every sample of the shards in `sorder`: one shard after another, or
// interleaved (o.interleave samples of each of o.interleave_cycle shards in turn; a shard
// that ends gives its place in the cycle to the next shard of sorder, as in tf.data).
template <typename F>
void ForEachInSequence(const std::vector<ShardInfo>& shards, const std::vector<size_t>& sorder,
                       const EpochPlanOptions& o, F&& f) {
  const size_t cycle = ShardsSideBySide(o);
  if (cycle <= 1) {
    for (size_t s : sorder)
      for (uint64_t i = shards[s].begin; i < shards[s].end; ++i) f(i);
    return;
  }
  struct Slot {
    uint64_t next, end;
  };
  size_t taken = 0;  // shards of sorder given a slot so far
  auto refill = [&](Slot* slot) {
    while (taken < sorder.size()) {
      const ShardInfo& sh = shards[sorder[taken++]];
      if (sh.end > sh.begin) {
        *slot = Slot{sh.begin, sh.end};
        return true;
      }
    }
    return false;
  };
  std::vector<Slot> slots;
  for (Slot s; slots.size() < cycle && refill(&s);) slots.push_back(s);
  while (!slots.empty()) {
    for (size_t c = 0; c < slots.size();) {
      Slot& s = slots[c];
      const uint64_t e = std::min<uint64_t>(s.end, s.next + o.interleave);
      for (uint64_t i = s.next; i < e; ++i) f(i);
      s.next = e;
      if (s.next == s.end && !refill(&s)) {
        slots.erase(slots.begin() + static_cast<std::ptrdiff_t>(c));
        continue;
      }
      ++c;
    }
  }
}

}  // namespace

std::vector<uint64_t> GlobalOrder(const std::vector<ShardInfo>& shards, uint64_t n, int epoch,
                                  const EpochPlanOptions& o) {
  std::vector<uint64_t> order;
  order.reserve(n);
  if (!o.shuffle) {
    if (ShardsSideBySide(o) <= 1) {
      for (uint64_t i = 0; i < n; ++i) order.push_back(i);
    } else {
      ForEachInSequence(shards, ShardOrder(shards, n, epoch, o), o,
                        [&](uint64_t i) { order.push_back(i); });
    }
    return order;
  }
  if (o.global_shuffle || (shards.size() <= 1 && o.shuffle_buffer >= n)) {
    for (uint64_t i = 0; i < n; ++i) order.push_back(i);
    Rng rng(o.seed, static_cast<uint64_t>(epoch), 0, kStreamGlobalShuffle);
    for (uint64_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
    return order;
  }
  const std::vector<size_t> sorder = ShardOrder(shards, n, epoch, o);
  // Shuffle buffer over the shards' samples in sequence (concatenated or interleaved).
  size_t k = std::max<size_t>(1, o.shuffle_buffer);
  std::vector<uint64_t> buf;
  buf.reserve(std::min<uint64_t>(k, n));
  Rng rng(o.seed, static_cast<uint64_t>(epoch), 0, kStreamShuffleBuffer);
  ForEachInSequence(shards, sorder, o, [&](uint64_t i) {
    if (buf.size() < k) {
      buf.push_back(i);
      return;
    }
    size_t j = rng.Below(k);
    order.push_back(buf[j]);
    buf[j] = i;
  });
  for (size_t i = buf.size(); i > 1; --i) std::swap(buf[i - 1], buf[rng.Below(i)]);
  order.insert(order.end(), buf.begin(), buf.end());
  return order;
}

Result<std::vector<uint64_t>> PlanEpoch(const std::vector<ShardInfo>& shards, uint64_t n,
                                        int epoch, const EpochPlanOptions& o,
                                        uint64_t consumed) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    return InvalidArgument("rank {} is not in [0, world size {})", o.rank, o.world_size);
  if (n == 0) return InvalidArgument("the dataset is empty");
  uint64_t per = SamplesPerRank(n, o.world_size, o.balance);
  if (per == 0)
    return InvalidArgument(
        "the dataset has {} samples, fewer than the world size {}: with --balance drop every "
        "rank would get none",
        n, o.world_size);
  std::vector<uint64_t> mine;
  if (consumed >= n) return mine;
  per = SamplesPerRank(n - consumed, o.world_size, o.balance);
  std::vector<uint64_t> global = GlobalOrder(shards, n, epoch, o);
  mine.reserve(per);
  const uint64_t w = static_cast<uint64_t>(o.world_size);
  for (uint64_t j = 0; j < per; ++j) {
    uint64_t p = consumed + j * w + static_cast<uint64_t>(o.rank);
    mine.push_back(global[p < n ? p : (p - n) % n]);  // pad: wrap to the epoch's start
  }
  return mine;
}

uint64_t ConsumedAfter(uint64_t n, int world_size, uint64_t consumed,
                       uint64_t per_rank_delivered) {
  uint64_t w = static_cast<uint64_t>(world_size < 1 ? 1 : world_size);
  if (consumed >= n) return n;
  uint64_t left = n - consumed;
  return per_rank_delivered >= (left + w - 1) / w ? n
                                                  : std::min(n, consumed + per_rank_delivered * w);
}

Result<RankInfo> ResolveRank(int rank, int world_size) {
  RankInfo info;
  if (rank >= 0 || world_size > 0) {
    if (rank < 0 || world_size < 1)
      return InvalidArgument("give both --rank and --world-size (got rank {}, world size {})",
                             rank, world_size);
    info.rank = rank;
    info.world_size = world_size;
    info.source = "options";
  } else {
    struct Pair {
      const char* r;
      const char* w;
      const char* name;
    };
    const Pair pairs[] = {{"RANK", "WORLD_SIZE", "RANK/WORLD_SIZE"},
                          {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_*"},
                          {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_*"}};
    info.source = "default";
    for (const auto& p : pairs) {
      const char* r = std::getenv(p.r);
      const char* w = std::getenv(p.w);
      if (r && w && *r && *w) {
        char* end1 = nullptr;
        char* end2 = nullptr;
        long rv = std::strtol(r, &end1, 10), wv = std::strtol(w, &end2, 10);
        if (*end1 || *end2)
          return InvalidArgument("{}={} / {}={} are not integers", p.r, r, p.w, w);
        info.rank = static_cast<int>(rv);
        info.world_size = static_cast<int>(wv);
        info.source = p.name;
        break;
      }
    }
  }
  if (info.world_size < 1 || info.rank < 0 || info.rank >= info.world_size)
    return InvalidArgument("rank {} is not in [0, world size {}) (from {})", info.rank,
                           info.world_size, info.source);
  return info;
}

}  // namespace stoker
