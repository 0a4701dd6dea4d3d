// `stoker bench tokens`: index build time and peak memory, then token batches delivered
// flat out next to the memcpy limit (the same token bytes copied out of the page cache).
#pragma once

#include <cstdint>
#include <string>

#include "tokens/token_pipeline.h"

namespace stoker::tokens {

struct TokenBenchOptions {
  TokenPipelineOptions pipeline;
  uint64_t steps = 200;        // batches timed (after warmup)
  uint64_t warmup = 5;
  bool index_only = false;     // stop after building the indices
  bool memcpy_limit = true;
};

struct TokenBenchResult {
  // Open + index build of epoch 0 (all corpora).
  double open_s = 0, index_build_s = 0, index_build_cpu_s = 0;
  uint64_t index_bytes = 0;
  bool index_from_cache = false;
  int64_t peak_rss_before = 0, peak_rss_after_index = 0;  // bytes (getrusage ru_maxrss)
  uint64_t documents = 0, tokens = 0, samples_per_epoch = 0;
  // Delivery.
  uint64_t batches = 0, delivered_tokens = 0, pad_tokens = 0;
  double wall_s = 0, cpu_s = 0;
  double tokens_per_s = 0, tokens_per_cpu_s = 0;
  double out_bytes_per_s = 0;
  double out_bytes_per_token = 0;  // token-array bytes a batch holds / its B * S positions
  // memcpy of the same output bytes per batch (contiguous runs of the mapped corpus, from
  // the page cache, at random places) into one reused buffer of the batch's size.
  double memcpy_bytes_per_s = 0, memcpy_tokens_per_s = 0;
  // Delivery / memcpy rate: the median over rounds of steps / 10 batches, delivery and
  // memcpy interleaved (memcpy_tokens_per_s is over all its rounds).
  double ratio_to_memcpy = 0;
};

Result<TokenBenchResult> RunTokenBench(const TokenBenchOptions& o);

// Peak resident set of this process so far, in bytes.
int64_t PeakRssBytes();

}  // namespace stoker::tokens
