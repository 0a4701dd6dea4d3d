// RandomAccessFile over bytes in memory (tests, fuzz targets, decompressed streams).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io/env.h"

namespace stoker {

class MemoryFile final : public RandomAccessFile {
 public:
  MemoryFile(std::string path, std::vector<uint8_t> data)
      : path_(std::move(path)), data_(std::move(data)) {}
  MemoryFile(std::string path, const uint8_t* p, size_t n)
      : path_(std::move(path)), data_(p, p + n) {}
  Result<size_t> ReadAt(uint64_t offset, size_t n, uint8_t* dst) const override {
    if (offset >= data_.size()) return size_t{0};
    size_t k = std::min<uint64_t>(n, data_.size() - offset);
    if (k) std::memcpy(dst, data_.data() + offset, k);
    return k;
  }
  uint64_t size() const override { return data_.size(); }
  const std::string& path() const override { return path_; }
  const std::vector<uint8_t>& data() const { return data_; }

 private:
  std::string path_;
  std::vector<uint8_t> data_;
};

}  // namespace stoker
