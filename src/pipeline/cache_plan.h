// The pipeline's side of the node-wide cache (io/cache_env.h): opening it from the options
// (cache_dir, cache_limit), handing it the epoch's order, and its counters in the stats.
// The executor calls these three functions; the cache's logic lives in io/cache_env.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "formats/dataset.h"
#include "io/cache_env.h"
#include "pipeline/pipeline.h"
#include "pipeline/stats.h"

namespace stoker {

// The cache in front of `backing` when o.cache_dir is set (nullptr when not). cache_limit
// 0 (auto): 80 % of the space free on the cache directory's file system, plus what the
// cache already holds.
Result<std::unique_ptr<CacheEnv>> OpenPipelineCache(const PipelineOptions& o, Env* backing);

// This rank's order as the files it reads: one span per run of reads of a file (reads of
// a file further apart than `gap` positions start a new span). A file is the sample's
// shard, or, for one-file-per-sample formats (random_access_is_cheap), the sample's file.
std::vector<CachePlanItem> CachePlanFromOrder(const Dataset& ds, const std::vector<uint64_t>& order,
                                              uint64_t gap = 4096);

// The cache's counters as PipelineStats::cache.
PipelineCacheStats CacheStatsOf(const CacheEnv& cache);

}  // namespace stoker
