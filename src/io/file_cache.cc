#include <cstdint>
#include "io/file_cache.h"

namespace stoker {

Result<std::shared_ptr<RandomAccessFile>> ShardFileCache::Get(uint32_t id,
                                                             const std::string& path) const {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = map_.find(id);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Open outside the lock; two threads racing on the same shard both open, one wins.
  auto f = env_->NewRandomAccessFile(path);
  if (!f.ok()) return f.status();
  std::shared_ptr<RandomAccessFile> file(std::move(f).value());
  std::lock_guard<std::mutex> lk(mu_);
  auto it = map_.find(id);
  if (it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  lru_.emplace_front(id, file);
  map_[id] = lru_.begin();
  while (lru_.size() > capacity_) {
    map_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return file;
}

size_t ShardFileCache::open_files() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lru_.size();
}

}  // namespace stoker
