// Look-ahead across objects, for readers that know which objects they will read next (the
// pipeline's epoch plan) but not yet the byte ranges: the next shard's first blocks are
// fetched while the current shard is still being read, so the reader never waits a round
// trip at a shard boundary. Without a node cache (cache_dir) this is the only look-ahead
// across shards; the cache has its own (it is handed the whole plan).
#pragma once

#include <cstdint>
#include <string>

namespace stoker {

// Opens `url` for reading in the background (its HEAD) and starts fetching its read-ahead
// blocks from `offset`; the next NewRandomAccessFile(url) of this process (not `direct`)
// takes that file and its blocks over. At most 4 files wait to be taken (older ones are
// dropped with their blocks); the blocks count against the read-ahead budget. Does nothing
// for paths that are not object URLs, with read-ahead off (STOKER_S3_BLOCK_MB=0), for a
// `url` already waiting or in flight, or in a build without object-store support.
void PrefetchObject(const std::string& url, uint64_t offset = 0);

struct ObjectPrefetchCounters {
  uint64_t hints = 0;     // PrefetchObject calls that started a background open
  uint64_t adopted = 0;   // of those, files a later open took over
  uint64_t dropped = 0;   // files never taken (dropped for newer ones, or their open failed)
};
ObjectPrefetchCounters GetObjectPrefetchCounters();

}  // namespace stoker
