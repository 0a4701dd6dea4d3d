// Storage probe (`stoker bench io PATH`): sequential and random read throughput and IOPS of
// the storage under PATH, over block sizes and concurrency, with the page cache bypassed:
// O_DIRECT where the file system accepts it, else posix_fadvise(DONTNEED) of the test
// file's pages before each pass (ProbeResult::cache_mode says which). All reads go through
// Env; the O_DIRECT capability is checked with one open(2).
//
// PATH may be an object URL (s3://bucket/prefix/, gs://...): the test object is uploaded
// there (and deleted after, unless kept), every read is one ranged GET (reads above 12 MB
// are parallel 8 MB parts, as in the pipeline), "readers" are requests in flight, and the
// latency of the smallest single-reader random read is reported as time to first byte.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "io/env.h"

namespace stoker {

struct ProbeOptions {
  std::string path;                       // a directory (a test file is created in it) or a file
  uint64_t file_bytes = 1ull << 30;       // size of the test file to create
  std::vector<size_t> block_sizes = {4u << 10, 64u << 10, 1u << 20, 16u << 20};
  std::vector<int> concurrency = {1, 4, 16, 64};
  bool sequential = true;
  bool random = true;
  double seconds_per_point = 2.0;         // each (pattern, block, threads) point runs at most this long
  bool keep_file = false;                 // keep a created test file for the next run
  bool allow_direct = true;               // false: always fadvise
  uint64_t seed = 1;
  Env* env = nullptr;                     // default Env::Default()
  Clock* clock = nullptr;                 // default Clock::Real()
  // Called after each point with (points done, points total, description).
  std::function<void(size_t, size_t, const std::string&)> progress;
};

struct ProbePoint {
  std::string pattern;  // "seq" or "rand"
  size_t block = 0;
  int threads = 0;
  uint64_t bytes = 0;
  uint64_t ops = 0;
  double seconds = 0;
  double mb_s = 0;      // MB = 1e6 bytes
  double iops = 0;
  double p50_us = 0, p99_us = 0;  // per-read latency
};

struct ProbeResult {
  std::string file;
  std::string fs_type;      // "ext4", "xfs", "tmpfs", "nfs", "lustre", ... or "0x..."
  uint64_t file_bytes = 0;
  bool created = false;     // the probe wrote the test file
  double write_mb_s = 0;    // when created: buffered write + fsync throughput
  std::string cache_mode;   // "O_DIRECT", "fadvise(DONTNEED)" or "none (object store)"
  bool object_store = false;  // PATH was an s3:// or gs:// URL
  // Latency of one small request with nothing else in flight (the random point with the
  // smallest block and the fewest readers): time to first byte on an object store.
  size_t ttfb_block = 0;
  double ttfb_p50_us = 0, ttfb_p99_us = 0;
  std::vector<ProbePoint> points;
};

Result<ProbeResult> RunStorageProbe(const ProbeOptions& opts);

// Can this storage feed `samples_per_s` samples of `sample_kb` KiB each, and with how many
// concurrent readers? Uses the random-read points at the block size nearest the sample
// size (per-sample reads: folder, LMDB, indexed random access) and the best sequential
// point (sharded formats streamed in large blocks).
struct FeedAdvice {
  double need_mb_s = 0;
  size_t random_block = 0;
  bool random_ok = false;
  int random_readers = 0;       // fewest readers that reach need_mb_s (or the best point's)
  double random_mb_s = 0;
  bool sequential_ok = false;
  int sequential_readers = 0;
  size_t sequential_block = 0;
  double sequential_mb_s = 0;
  // Object stores: the smallest shard whose open (HEAD + first byte, about two request
  // latencies) costs under 5 % of reading it at the chosen point's per-request rate.
  uint64_t min_shard_bytes = 0;
  std::string text;             // human-readable verdict
};
FeedAdvice AdviseFeed(const ProbeResult& r, double samples_per_s, double sample_kb);

std::string ProbeTable(const ProbeResult& r);
std::string ProbeJson(const ProbeResult& r, const FeedAdvice* advice);
// A self-contained HTML page with SVG charts (MB/s against readers, one line per block).
std::string ProbeHtml(const ProbeResult& r, const FeedAdvice* advice);

// Human-readable byte size: "4 KiB", "16 MiB".
std::string FormatBlock(uint64_t bytes);
// Parses "4k", "64KiB", "1m", "16MiB", "1g", "1234" into bytes.
Result<uint64_t> ParseByteSize(const std::string& s);

}  // namespace stoker
