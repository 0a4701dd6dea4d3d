// Read-ahead in blocks for files where every read is a request (object stores): a decorator
// of any RandomAccessFile that turns small reads which follow each other (a tar scanned
// header by header, the samples of a shard read in order, by one thread or several) into
// one ranged read per block, and fetches the next block while the current one is used.
//
// Reads that do not follow the previous ones (random access into a large file) go to the
// file as they are, so a shuffled read of single samples costs no extra bytes. Blocks live
// in a process-wide budget: when it is spent, reads go to the file directly (never more
// memory than the budget, never a wait for memory). A block whose fetch failed is dropped;
// the read that needed it returns the error (naming the path and range, from the file).
//
// Thread-safe like any RandomAccessFile: concurrent readers of one block wait for its single
// fetch. Prefetches run on the executor given; they hold the state they need, so the file
// may be closed while one is in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "io/env.h"

namespace stoker {

struct ReadAheadOptions {
  uint64_t block_bytes = 8ull << 20;  // one ranged read per block (AWS advises 8-16 MB)
  int ahead = 1;                      // blocks fetched ahead of the one in use
  // Reads larger than this go to the file as they are (it splits them into parallel parts).
  uint64_t max_small_read = 4ull << 20;
  // Runs a prefetch (never inline on the reader's thread); null: no prefetch.
  std::function<void(std::function<void()>)> executor;
};

// The process-wide byte budget of all read-ahead blocks (default 512 MiB; set before use).
void SetReadAheadBudget(uint64_t bytes);
struct ReadAheadCounters {
  uint64_t block_fetches = 0;    // blocks read from the file (prefetched or on demand)
  uint64_t prefetches = 0;       // of those, started ahead of use
  uint64_t direct_reads = 0;     // small reads sent to the file as they were (not sequential)
  uint64_t budget_misses = 0;    // sequential reads sent directly because the budget was spent
  uint64_t bytes_in_use = 0;     // block bytes held now
};
ReadAheadCounters GetReadAheadCounters();

std::unique_ptr<RandomAccessFile> NewReadAheadFile(std::shared_ptr<RandomAccessFile> file,
                                                   const ReadAheadOptions& opts);

// Starts fetching, on the executor, the `ahead` blocks of a read-ahead file from the one
// holding `offset` (budget permitting), and takes `offset` as where reads continue: the next
// read there counts as sequential (a file read to its end in the last epoch starts over). For a reader that knows it will read the file from
// `offset` soon (the next shard of the epoch's order). Returns the blocks started; 0 when
// `file` is not a read-ahead file (or has no executor).
int WarmReadAhead(const RandomAccessFile& file, uint64_t offset);

}  // namespace stoker
