// Checksums used by the format readers and `stoker convert`:
//  - CRC32C (Castagnoli), with SSE4.2 hardware acceleration picked at run time and a
//    table fallback; TFRecord's masked form (same mask as LevelDB).
//  - XXH64 (Yann Collet's xxHash, 64-bit), one-shot and streaming, for content hashes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace stoker {

// CRC32C of data, continuing from `crc` (0 for a fresh checksum). Thread-safe.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
// True when Crc32c uses the SSE4.2 crc32 instruction on this CPU.
bool Crc32cIsHardware();
// The table implementation (exposed for tests comparing both paths).
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);

inline uint32_t MaskCrc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline uint32_t UnmaskCrc32c(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

uint64_t XXH64(const void* data, size_t n, uint64_t seed = 0);

// Streaming XXH64: Update() any number of times, Digest() gives the same value as the
// one-shot function over the concatenated input. Not thread-safe.
class XXH64Hasher {
 public:
  explicit XXH64Hasher(uint64_t seed = 0) { Reset(seed); }
  void Reset(uint64_t seed = 0);
  void Update(const void* data, size_t n);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  void UpdateU64(uint64_t v);  // 8 bytes little-endian
  uint64_t Digest() const;

 private:
  uint64_t v_[4];
  uint64_t seed_ = 0;
  uint64_t total_ = 0;
  uint8_t buf_[32];
  size_t buf_len_ = 0;
};

}  // namespace stoker
