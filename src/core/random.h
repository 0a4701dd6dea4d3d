// Counter-based randomness: every random choice in stoker is a pure function of
// (seed, epoch, sample index, stream), so output never depends on threads or timing.
#pragma once

#include <cstdint>

namespace stoker {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t MixKey(uint64_t seed, uint64_t epoch, uint64_t index, uint64_t stream = 0) {
  uint64_t h = SplitMix64(seed ^ 0x5354'4f4b'4552ULL);  // "STOKER"
  h = SplitMix64(h ^ epoch);
  h = SplitMix64(h ^ index);
  return SplitMix64(h ^ stream);
}

// A small deterministic generator (SplitMix64 stream) seeded from MixKey.
class Rng {
 public:
  explicit Rng(uint64_t key) : state_(key) {}
  Rng(uint64_t seed, uint64_t epoch, uint64_t index, uint64_t stream = 0)
      : state_(MixKey(seed, epoch, index, stream)) {}
  uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n).
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }
  // Uniform integer in [lo, hi] inclusive.
  int64_t Int(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo + 1)));
  }

 private:
  uint64_t state_;
};

}  // namespace stoker
