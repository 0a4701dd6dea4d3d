#include "pipeline/cache_plan.h"

#include <cstdint>
#include <sys/statvfs.h>

#include <algorithm>
#include <filesystem>
#include <unordered_map>

namespace stoker {

Result<std::unique_ptr<CacheEnv>> OpenPipelineCache(const PipelineOptions& o, Env* backing) {
  if (o.cache_dir.empty()) return std::unique_ptr<CacheEnv>();
  CacheOptions co;
  co.dir = o.cache_dir;
  co.limit = o.cache_limit;
  co.demand_fetch = false;  // the pipeline hands over its plan at every epoch
  if (co.limit <= 0) {
    std::error_code ec;
    std::filesystem::create_directories(o.cache_dir, ec);
    struct statvfs vfs;
    if (ec || ::statvfs(o.cache_dir.c_str(), &vfs) != 0)
      return IOError("cache_dir {}: cannot create or measure it", o.cache_dir);
    int64_t held = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(o.cache_dir, ec))
      if (e.is_regular_file(ec)) held += static_cast<int64_t>(e.file_size(ec));
    co.limit = static_cast<int64_t>(0.8 * static_cast<double>(vfs.f_bavail) *
                                    static_cast<double>(vfs.f_frsize)) +
               held;
    if (co.limit <= 0) return IOError("cache_dir {}: its file system is full", o.cache_dir);
  }
  auto c = CacheEnv::Open(backing, co);
  if (!c.ok()) return c.status().WithContext("cache_dir " + o.cache_dir);
  return c;
}

std::vector<CachePlanItem> CachePlanFromOrder(const Dataset& ds, const std::vector<uint64_t>& order,
                                              uint64_t gap) {
  std::vector<CachePlanItem> items;
  std::unordered_map<std::string, size_t> open_span;  // path -> its latest span
  const auto& shards = ds.shards();
  const bool per_file = ds.random_access_is_cheap();
  for (uint64_t pos = 0; pos < order.size(); ++pos) {
    uint64_t idx = order[pos];
    std::string path;
    if (per_file) {
      path = ds.Location(idx);
    } else {
      auto it = std::upper_bound(shards.begin(), shards.end(), idx,
                                 [](uint64_t i, const ShardInfo& s) { return i < s.end; });
      if (it == shards.end()) continue;
      path = it->path;
    }
    auto [sp, fresh] = open_span.emplace(path, items.size());
    if (!fresh && pos - items[sp->second].last <= gap) {
      items[sp->second].last = pos;
      continue;
    }
    sp->second = items.size();
    items.push_back({std::move(path), pos, pos});
  }
  return items;
}

PipelineCacheStats CacheStatsOf(const CacheEnv& cache) {
  CacheCounters c = cache.counters();
  PipelineCacheStats s;
  s.enabled = true;
  s.dir = cache.options().dir;
  s.limit_bytes = c.limit;
  s.hit_rate = c.hit_rate();
  s.hit_bytes = c.hit_bytes;
  s.stream_bytes = c.stream_bytes;
  s.fetched_bytes = c.fetched_bytes;
  s.source_bytes = c.source_bytes;
  s.fetches = c.fetches;
  s.shared_entries = c.shared_entries;
  s.evictions = c.evictions;
  s.corrupt_entries = c.corrupt_entries;
  s.stall_s = static_cast<double>(c.stall_ns) * 1e-9;
  s.occupancy_bytes = c.occupancy;
  s.max_occupancy_bytes = c.max_occupancy;
  return s;
}

}  // namespace stoker
