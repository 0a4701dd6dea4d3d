// A whole file as bytes in memory: mmap(2) for the default (POSIX) Env, or read through
// any other Env (a fault-injecting one in tests), so the I/O seam still holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace stoker {

class MappedFile {
 public:
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // env == nullptr or Env::Default(): read-only shared mapping (MAP_SHARED, so pages come
  // from the page cache and are shared by every process reading the corpus). `populate`:
  // map every page now (MAP_POPULATE) instead of at first touch.
  static Result<std::unique_ptr<MappedFile>> Open(Env* env, const std::string& path,
                                                  bool populate = false);

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool mapped() const { return map_ != nullptr; }
  // madvise(MADV_WILLNEED / MADV_RANDOM / MADV_SEQUENTIAL); no-op for read copies.
  void Advise(int advice) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;
  std::vector<uint8_t> copy_;
};

}  // namespace stoker
