// A node-wide local cache (NVMe or RAM disk) in front of a slow or remote Env: an
// EnvWrapper whose files read a local copy of each file once it is fetched. See
// docs/cache.md for the design; in short:
//
//   * Entry = one whole file of the backing Env (a shard). A file larger than the limit,
//     or one that is not in the plan, streams through the backing Env uncached.
//   * Look-ahead: SetPlan() hands the cache this process's epoch order (which files, at
//     which positions of its order). A fetcher pool copies the next files ahead of need,
//     at most `max_fetches` at a time, in plan order; a file the plan does not name is
//     never fetched (without a plan, `demand_fetch` fetches a file on its first read).
//   * Eviction: Belady from the plans of every process using the cache (an entry not
//     needed again this epoch by any live process goes first, least recently used first;
//     then the one needed furthest in the future). A prefetch never evicts an entry needed
//     sooner than itself; an entry in use is never evicted. When no room can be made, the
//     read streams through: never a wait for space, so never a deadlock.
//   * Sharing: the processes of a node that open the same directory share it. One file
//     lock per entry (flock on locks/<key>.lock) makes each file fetched once per node;
//     another process that needs it waits on that lock (a kill -9 releases it). Space is
//     accounted under one directory lock (.lock) held only while the directory is scanned.
//   * Crash safety: an entry is written as entries/<key>.part, its metadata (source path,
//     size, mtime, CRC32) as entries/<key>.meta, and becomes visible by rename to
//     entries/<key>. On open the size and the source's size and mtime are checked, and the
//     CRC once per process; a mismatch removes the entry and fetches it again.
//
// Thread-safety: every method may be called from any thread; files' ReadAt too.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/env.h"

namespace stoker {

struct CacheOptions {
  std::string dir;          // the cache directory (created); shared by every process using it
  int64_t limit = 0;        // bytes the entries may occupy (> 0)
  int max_fetches = 4;      // fetches in flight from this process
  size_t chunk_bytes = 8 << 20;  // one read of the backing file while fetching
  bool demand_fetch = true;  // without a plan, fetch a file on its first read
  bool verify_crc = true;    // check an entry's CRC32 the first time this process opens it
  // Tests only: called at named points of a fetch with the entry's key, so that a test can
  // hold one thread at a point while another runs ("reserve-scanned": the directory listed
  // under the space lock; "copied": a fetch done copying, its part still open to readers;
  // "commit": a fetch about to make its entry visible). Empty: none.
  std::function<void(const char* point, const std::string& key)> test_hook;
};

// One span of this process's epoch order that reads `path`: positions [first, last].
// A path may have several spans (read early, then again late).
struct CachePlanItem {
  std::string path;
  uint64_t first = 0, last = 0;
};

struct CacheCounters {
  uint64_t hit_reads = 0, hit_bytes = 0;            // reads served from a local entry
  uint64_t stream_reads = 0, stream_bytes = 0;      // reads passed through to the source
  uint64_t fetches = 0, fetched_bytes = 0;          // entries this process copied in
  uint64_t shared_entries = 0;   // entries this process found fetched by another one
  uint64_t evictions = 0;
  uint64_t corrupt_entries = 0;  // entries that failed the check on open (refetched)
  uint64_t source_bytes = 0;     // every byte read from the source (fetch + stream)
  int64_t stall_ns = 0;          // readers waiting for a fetch (this process's or another's)
  int64_t occupancy = 0;         // bytes in the directory at the last scan
  int64_t max_occupancy = 0;     // most seen by this process's scans
  int64_t limit = 0;
  // Share of the bytes read that did not come from the source in this run: reads of
  // entries that were there already (or fetched by another process). Reads of an entry
  // this process fetched are misses, prefetched or not.
  double hit_rate() const {
    double read = static_cast<double>(hit_bytes + stream_bytes);
    if (read <= 0) return 0;
    double miss = static_cast<double>(fetched_bytes + stream_bytes);
    return std::max(0.0, 1.0 - miss / read);
  }
};

class CacheEnv final : public EnvWrapper {
 public:
  // `backing` must outlive the CacheEnv and every file it opened.
  static Result<std::unique_ptr<CacheEnv>> Open(Env* backing, const CacheOptions& o);
  ~CacheEnv() override;

  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const OpenOptions& opts = {}) override;

  // Replaces the plan (a new epoch, or a resume); look-ahead restarts from its start.
  // Items in order of `first`. Published to the other processes for their eviction.
  void SetPlan(std::vector<CachePlanItem> plan);
  // Waits until the fetcher has nothing it may start and nothing in flight (tests, benches).
  void WaitIdle();
  CacheCounters counters() const;
  // Bytes the directory's entries occupy now (complete and in flight), by a scan.
  int64_t Occupancy() const;
  const CacheOptions& options() const;

  struct Impl;

 private:
  explicit CacheEnv(Env* backing) : EnvWrapper(backing) {}
  std::shared_ptr<Impl> impl_;
};

// "ab12..." (16 hex digits) naming the entry of `path` in the cache directory.
std::string CacheEntryKey(const std::string& path);

}  // namespace stoker
