// Deterministic synthetic test images for codec and ops tests: smooth gradients, a few
// hard edges (rectangles, a disc) and mild noise, so JPEG round trips are meaningful.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/random.h"

namespace stoker::testing {

inline std::vector<uint8_t> SyntheticRgb(int w, int h, uint64_t seed, int noise = 6) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  Rng rng(seed);
  const double cx = w * (0.3 + 0.4 * rng.Uniform()), cy = h * (0.3 + 0.4 * rng.Uniform());
  const double rad = 0.25 * (w < h ? w : h);
  const int rx0 = static_cast<int>(w * 0.1), rx1 = static_cast<int>(w * 0.45);
  const int ry0 = static_cast<int>(h * 0.55), ry1 = static_cast<int>(h * 0.9);
  const double phase = rng.Uniform() * 6.28;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      double r = 40 + 170.0 * x / (w > 1 ? w - 1 : 1);
      double g = 60 + 150.0 * y / (h > 1 ? h - 1 : 1);
      double b = 128 + 90 * std::sin(phase + 0.05 * x + 0.03 * y);
      if ((x - cx) * (x - cx) + (y - cy) * (y - cy) < rad * rad) {
        r = 230;
        g = 40;
        b = 60;
      }
      if (x >= rx0 && x < rx1 && y >= ry0 && y < ry1) {
        r = 20;
        g = 90 + 60 * ((x / 4) % 2);
        b = 200;
      }
      double v[3] = {r, g, b};
      uint8_t* p = &px[(static_cast<size_t>(y) * w + x) * 3];
      for (int c = 0; c < 3; ++c) {
        double n = noise > 0 ? static_cast<double>(rng.Int(-noise, noise)) : 0.0;
        double q = v[c] + n;
        p[c] = static_cast<uint8_t>(q < 0 ? 0 : q > 255 ? 255 : q);
      }
    }
  }
  return px;
}

inline double MeanAbsDiff(const uint8_t* a, const uint8_t* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i]));
  return n ? s / n : 0;
}

inline int MaxAbsDiff(const uint8_t* a, const uint8_t* b, size_t n) {
  int m = 0;
  for (size_t i = 0; i < n; ++i) {
    int d = std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i]));
    if (d > m) m = d;
  }
  return m;
}

}  // namespace stoker::testing
