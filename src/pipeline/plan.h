// Epoch planning: which dataset indices this rank delivers, in which order. A pure
// function of (dataset shape, seed, epoch, rank, world size): no threads, no clocks.
//
// Global order: with shuffling, either a full permutation (datasets where every read costs
// the same, like a folder of files: PyTorch's RandomSampler), or shard order shuffled and
// the concatenated samples passed through a bounded shuffle buffer (WebDataset-style, so
// reads stay mostly sequential within shards). The buffer is simulated on indices, so it
// costs 8 bytes per slot, not a sample.
// Interleave (tf.data's interleave(cycle_length, block_length)): the shards, in shard
// order, are read `interleave_cycle` at a time, `interleave` samples of each in turn; a
// shard that ends gives its place to the next. A stream source (a Kafka topic's partitions)
// is read that way so that its partitions stream side by side, as a consumer assigned all of
// them reads them. 0 (files): one shard after another. The shuffle buffer, when on, mixes
// the interleaved sequence.
// Rank split: strided, as torch's DistributedSampler: rank r takes global positions
// r, r+W, r+2W, ... So when every rank has delivered k samples, the samples consumed are
// exactly the prefix [0, k*W) of the global order, whatever W was; the global order itself
// never depends on W. per = floor(N/W) (drop: the last N mod W positions are left out) or
// ceil(N/W) (pad: positions past N wrap around to the start of the epoch, as
// DistributedSampler pads). Every rank gets exactly `per` samples, so the batch count is
// equal on all ranks.
// Elastic resume: after `consumed` global positions, the remainder [consumed, N) is split
// among the W' ranks the same way (positions consumed + r, consumed + r + W', ...), with
// per' = floor or ceil((N - consumed) / W').
#pragma once

#include <cstdint>
#include <vector>

#include "formats/dataset.h"
#include "pipeline/pipeline.h"

namespace stoker {

struct EpochPlanOptions {
  bool shuffle = true;
  bool global_shuffle = false;  // full permutation instead of shards + buffer
  uint64_t seed = 0;
  size_t shuffle_buffer = 8192;
  size_t interleave = 0;        // samples of a shard in turn (0: shards one after another)
  size_t interleave_cycle = 0;  // shards side by side (0 or 1: one after another)
  int rank = 0, world_size = 1;
  RankBalance balance = RankBalance::kPad;
};

// Samples every rank gets per epoch.
uint64_t SamplesPerRank(uint64_t n, int world_size, RankBalance balance);

// The order in which `epoch` reads the shards (before the shuffle buffer mixes them): shard
// order, or shuffled per epoch; empty with a global shuffle (no shard order).
std::vector<size_t> ShardOrder(const std::vector<ShardInfo>& shards, uint64_t n, int epoch,
                               const EpochPlanOptions& o);

// Shards read at once in a pass: interleave_cycle when interleaving, else 1.
size_t ShardsSideBySide(const EpochPlanOptions& o);

// The global order of all n samples for `epoch` (before the rank split).
std::vector<uint64_t> GlobalOrder(const std::vector<ShardInfo>& shards, uint64_t n, int epoch,
                                  const EpochPlanOptions& o);

// This rank's indices, in delivery order, for the part of the epoch after its first
// `consumed` global positions (0: the whole epoch). Empty when nothing is left.
Result<std::vector<uint64_t>> PlanEpoch(const std::vector<ShardInfo>& shards, uint64_t n,
                                        int epoch, const EpochPlanOptions& o,
                                        uint64_t consumed = 0);

// Global positions consumed once every rank has delivered `per_rank_delivered` samples of a
// pass that began after `consumed`: consumed + per_rank_delivered * W, at most n.
uint64_t ConsumedAfter(uint64_t n, int world_size, uint64_t consumed,
                       uint64_t per_rank_delivered);

// Random streams (the `stream` argument of Rng) used across stoker.
enum RngStream : uint64_t {
  kStreamShardOrder = 1,
  kStreamShuffleBuffer = 2,
  kStreamGlobalShuffle = 3,
  kStreamCrop = 10,
  kStreamFlip = 11,
};

}  // namespace stoker
