// A bounded cache of open shard files shared by the reader threads of one dataset.
// RandomAccessFile::ReadAt is thread-safe, so one handle serves every thread; at most
// `capacity` handles stay open (least recently used is closed first; a handle still in
// use by a reader stays alive until that read returns).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "io/env.h"

namespace stoker {

class ShardFileCache {
 public:
  ShardFileCache(Env* env, size_t capacity) : env_(env), capacity_(capacity ? capacity : 1) {}
  // Thread-safe. Opens `path` (shard number `id`) or returns the cached handle.
  Result<std::shared_ptr<RandomAccessFile>> Get(uint32_t id, const std::string& path) const;
  size_t open_files() const;

 private:
  Env* env_;
  size_t capacity_;
  mutable std::mutex mu_;
  mutable std::list<std::pair<uint32_t, std::shared_ptr<RandomAccessFile>>> lru_;  // front = newest
  mutable std::unordered_map<uint32_t, decltype(lru_)::iterator> map_;
};

}  // namespace stoker
