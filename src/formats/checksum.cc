#include "formats/checksum.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace stoker {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // CRC32C, reflected

struct Tables {
  uint32_t byte[256];
  // shift[k][b]: the raw CRC register value b << (8k) advanced over kBlock zero bytes.
  static constexpr size_t kBlock = 4096;
  uint32_t shift[4][256];
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      byte[i] = c;
    }
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t r = 1u << bit;
      for (size_t i = 0; i < kBlock; ++i) r = byte[r & 0xff] ^ (r >> 8);
      basis[bit] = r;
    }
    for (int k = 0; k < 4; ++k)
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int bit = 0; bit < 8; ++bit)
          if (b & (1u << bit)) v ^= basis[8 * k + bit];
        shift[k][b] = v;
      }
  }
  uint32_t Shift(uint32_t r) const {
    return shift[0][r & 0xff] ^ shift[1][(r >> 8) & 0xff] ^ shift[2][(r >> 16) & 0xff] ^
           shift[3][r >> 24];
  }
};

const Tables& T() {
  static const Tables t;
  return t;
}

uint32_t RawPortable(uint32_t r, const uint8_t* p, size_t n) {
  const uint32_t* tb = T().byte;
  for (size_t i = 0; i < n; ++i) r = tb[(r ^ p[i]) & 0xff] ^ (r >> 8);
  return r;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t RawHw(uint32_t r, const uint8_t* p, size_t n) {
  const Tables& t = T();
  uint64_t c = r;
  // Three independent streams over 3 x 4 KiB blocks hide the crc32 instruction's latency;
  // the partial CRCs are combined with the precomputed 4 KiB shift table.
  constexpr size_t L = Tables::kBlock;
  while (n >= 3 * L) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t* a = p;
    const uint8_t* b = p + L;
    const uint8_t* d = p + 2 * L;
    for (size_t i = 0; i < L; i += 8) {
      uint64_t x, y, z;
      std::memcpy(&x, a + i, 8);
      std::memcpy(&y, b + i, 8);
      std::memcpy(&z, d + i, 8);
      c = _mm_crc32_u64(c, x);
      c1 = _mm_crc32_u64(c1, y);
      c2 = _mm_crc32_u64(c2, z);
    }
    uint32_t m = t.Shift(static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1);
    m = t.Shift(m) ^ static_cast<uint32_t>(c2);
    c = m;
    p += 3 * L;
    n -= 3 * L;
  }
  while (n >= 8) {
    uint64_t x;
    std::memcpy(&x, p, 8);
    c = _mm_crc32_u64(c, x);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --n;
  }
  return c32;
}

bool HaveSse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc) {
  return ~RawPortable(~crc, static_cast<const uint8_t*>(data), n);
}

bool Crc32cIsHardware() {
#if defined(__x86_64__)
  return HaveSse42();
#else
  return false;
#endif
}

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  if (HaveSse42()) return ~RawHw(~crc, static_cast<const uint8_t*>(data), n);
#endif
  return Crc32cPortable(data, n, crc);
}

// ---------------------------------------------------------------------------------------
// XXH64

namespace {
constexpr uint64_t P1 = 11400714785074694791ULL;
constexpr uint64_t P2 = 14029467366897019727ULL;
constexpr uint64_t P3 = 1609587929392839161ULL;
constexpr uint64_t P4 = 9650029242287828579ULL;
constexpr uint64_t P5 = 2870177450012600261ULL;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t Read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, aarch64)
}
inline uint32_t Read32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t Round(uint64_t acc, uint64_t in) {
  acc += in * P2;
  acc = Rotl(acc, 31);
  return acc * P1;
}
inline uint64_t Merge(uint64_t acc, uint64_t v) {
  acc ^= Round(0, v);
  return acc * P1 + P4;
}
uint64_t Finish(uint64_t h, const uint8_t* p, size_t n) {
  while (n >= 8) {
    h ^= Round(0, Read64(p));
    h = Rotl(h, 27) * P1 + P4;
    p += 8;
    n -= 8;
  }
  if (n >= 4) {
    h ^= static_cast<uint64_t>(Read32(p)) * P1;
    h = Rotl(h, 23) * P2 + P3;
    p += 4;
    n -= 4;
  }
  while (n > 0) {
    h ^= (*p++) * P5;
    h = Rotl(h, 11) * P1;
    --n;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}
uint64_t Converge(const uint64_t v[4]) {
  uint64_t h = Rotl(v[0], 1) + Rotl(v[1], 7) + Rotl(v[2], 12) + Rotl(v[3], 18);
  for (int i = 0; i < 4; ++i) h = Merge(h, v[i]);
  return h;
}
}  // namespace

uint64_t XXH64(const void* data, size_t n, uint64_t seed) {
  XXH64Hasher h(seed);
  h.Update(data, n);
  return h.Digest();
}

void XXH64Hasher::Reset(uint64_t seed) {
  seed_ = seed;
  v_[0] = seed + P1 + P2;
  v_[1] = seed + P2;
  v_[2] = seed;
  v_[3] = seed - P1;
  total_ = 0;
  buf_len_ = 0;
}

void XXH64Hasher::Update(const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (buf_len_ + n < 32) {
    if (n) std::memcpy(buf_ + buf_len_, p, n);
    buf_len_ += n;
    return;
  }
  if (buf_len_ > 0) {
    size_t fill = 32 - buf_len_;
    std::memcpy(buf_ + buf_len_, p, fill);
    for (int i = 0; i < 4; ++i) v_[i] = Round(v_[i], Read64(buf_ + 8 * i));
    p += fill;
    n -= fill;
    buf_len_ = 0;
  }
  while (n >= 32) {
    v_[0] = Round(v_[0], Read64(p));
    v_[1] = Round(v_[1], Read64(p + 8));
    v_[2] = Round(v_[2], Read64(p + 16));
    v_[3] = Round(v_[3], Read64(p + 24));
    p += 32;
    n -= 32;
  }
  if (n) std::memcpy(buf_, p, n);
  buf_len_ = n;
}

void XXH64Hasher::UpdateU64(uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  Update(b, 8);
}

uint64_t XXH64Hasher::Digest() const {
  uint64_t h = total_ >= 32 ? Converge(v_) : seed_ + P5;
  h += total_;
  return Finish(h, buf_, buf_len_);
}

}  // namespace stoker
