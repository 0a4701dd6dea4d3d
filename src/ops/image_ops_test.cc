#include "ops/image_ops.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "codec/test_images.h"

namespace stoker {
namespace {

using testing::SyntheticRgb;

DecodedImage FromPixels(std::vector<uint8_t> px, int w, int h) {
  DecodedImage img;
  img.width = w;
  img.height = h;
  img.pixels = std::move(px);
  img.crop = CropRect{0, 0, w, h};
  img.source_width = w;
  img.source_height = h;
  return img;
}

// ---- RandomResizedCrop ----------------------------------------------------------------

TEST(RandomResizedCrop, StaysInsideWithinScaleAndRatio) {
  RandomResizedCropParams p;
  for (auto [w, h] : {std::pair{500, 375}, {375, 500}, {224, 224}, {1024, 683}, {64, 48}}) {
    int fallbacks = 0;
    for (uint64_t i = 0; i < 2000; ++i) {
      Rng rng(42, 0, i);
      CropRect c = RandomResizedCropRect(w, h, p, rng);
      ASSERT_GT(c.w, 0);
      ASSERT_GT(c.h, 0);
      ASSERT_GE(c.x, 0);
      ASSERT_GE(c.y, 0);
      ASSERT_LE(c.x + c.w, w);
      ASSERT_LE(c.y + c.h, h);
      const bool is_fallback = c.x == (w - c.w) / 2 && c.y == (h - c.h) / 2 &&
                               (c.w == w || c.h == h);
      if (is_fallback) {
        ++fallbacks;
        continue;
      }
      // w and h are rounded, so the bounds hold up to half a pixel on each side.
      const double area = static_cast<double>(w) * h;
      const double lo = (std::sqrt(p.scale_min * area) - 1) * (std::sqrt(p.scale_min * area) - 1);
      const double hi = (std::sqrt(p.scale_max * area) + 1) * (std::sqrt(p.scale_max * area) + 1);
      EXPECT_GE(c.w * c.h, lo);
      EXPECT_LE(c.w * c.h, hi);
      const double r = static_cast<double>(c.w) / c.h;
      EXPECT_GE(r, p.ratio_min * (c.w - 0.5) / c.w * c.h / (c.h + 0.5) - 1e-9);
      EXPECT_LE(r, p.ratio_max * (c.w + 0.5) / c.w * c.h / (c.h - 0.5) + 1e-9);
    }
    // The fallback needs ten misses in a row: rare for ordinary images.
    EXPECT_LT(fallbacks, 2000 / 20) << w << "x" << h;
  }
}

TEST(RandomResizedCrop, AreaAndPositionAreSpread) {
  // E[area fraction] = (0.08 + 1) / 2 = 0.54 for a square image (almost no rejections at
  // ratio 3/4..4/3 for small areas; large areas with extreme ratios are rejected and
  // redrawn, which lowers the mean a little).
  RandomResizedCropParams p;
  double sum = 0, sum_cx = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    Rng rng(7, 1, i);
    CropRect c = RandomResizedCropRect(1000, 1000, p, rng);
    sum += c.w * c.h / 1e6;
    sum_cx += c.x + c.w / 2.0;
  }
  EXPECT_GT(sum / n, 0.40);
  EXPECT_LT(sum / n, 0.56);
  EXPECT_NEAR(sum_cx / n, 500, 25);
}

TEST(RandomResizedCrop, FallsBackToClampedCenterCrop) {
  RandomResizedCropParams p;
  for (int i = 0; i < 50; ++i) {
    Rng rng(3, 0, i);
    // Too wide for any ratio in [3/4, 4/3] at >= 8% of the area: h = H, w = round(H * 4/3).
    CropRect c = RandomResizedCropRect(1000, 10, p, rng);
    EXPECT_EQ(c.h, 10);
    EXPECT_EQ(c.w, 13);
    EXPECT_EQ(c.x, (1000 - 13) / 2);
    EXPECT_EQ(c.y, 0);
    // Too tall: w = W, h = round(W / (3/4)).
    Rng rng2(3, 0, i);
    CropRect t = RandomResizedCropRect(10, 1000, p, rng2);
    EXPECT_EQ(t.w, 10);
    EXPECT_EQ(t.h, 13);
    EXPECT_EQ(t.y, (1000 - 13) / 2);
  }
  // scale_min > 1 can never fit: whole image when the ratio is inside the range.
  RandomResizedCropParams big;
  big.scale_min = 1.5;
  big.scale_max = 2.0;
  Rng rng(1);
  CropRect c = RandomResizedCropRect(100, 90, big, rng);
  EXPECT_EQ(c.x, 0);
  EXPECT_EQ(c.y, 0);
  EXPECT_EQ(c.w, 100);
  EXPECT_EQ(c.h, 90);
}

TEST(RandomResizedCrop, DeterministicPerRng) {
  RandomResizedCropParams p;
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    Rng a(9, 2, i), b(9, 2, i), c(9, 3, i);
    CropRect ra = RandomResizedCropRect(640, 480, p, a);
    CropRect rb = RandomResizedCropRect(640, 480, p, b);
    CropRect rc = RandomResizedCropRect(640, 480, p, c);
    EXPECT_EQ(ra.x, rb.x);
    EXPECT_EQ(ra.y, rb.y);
    EXPECT_EQ(ra.w, rb.w);
    EXPECT_EQ(ra.h, rb.h);
    differ += ra.x != rc.x || ra.w != rc.w;
  }
  EXPECT_GT(differ, 90);
}

// ---- CenterCrop -------------------------------------------------------------------------

TEST(CenterCrop, FollowsTorchvisionRounding) {
  // 500x375, Resize(256): short side h -> 256, w = int(256 * 500 / 375) = int(341.33) = 341.
  // CenterCrop(224): left = int(round((341 - 224) / 2)) = round(58.5) = 58 (half to even),
  // top = round(16.0) = 16.
  CenterCropPlan p = CenterCropRectFor(500, 375, 256, 224);
  EXPECT_EQ(p.resized_w, 341);
  EXPECT_EQ(p.resized_h, 256);
  EXPECT_EQ(p.crop_x, 58);
  EXPECT_EQ(p.crop_y, 16);
  EXPECT_EQ(p.crop_w, 224);
  EXPECT_DOUBLE_EQ(p.src_x, 58 * 500.0 / 341);
  EXPECT_DOUBLE_EQ(p.src_y, 16 * 375.0 / 256);
  EXPECT_DOUBLE_EQ(p.src_w, 224 * 500.0 / 341);
  EXPECT_DOUBLE_EQ(p.src_h, 224 * 375.0 / 256);
  // source_rect covers the box plus the filter support, inside the image.
  EXPECT_LE(p.source_rect.x, std::floor(p.src_x) - 2);
  EXPECT_GE(p.source_rect.x + p.source_rect.w, std::ceil(p.src_x + p.src_w) + 2);
  EXPECT_GE(p.source_rect.y, 0);
  EXPECT_LE(p.source_rect.y + p.source_rect.h, 375);

  // Portrait, and a difference that rounds half to even upwards: (343 - 224) / 2 = 59.5 -> 60.
  CenterCropPlan q = CenterCropRectFor(375, 502, 256, 224);
  EXPECT_EQ(q.resized_w, 256);
  EXPECT_EQ(q.resized_h, static_cast<int>(256.0 * 502 / 375));  // 342
  EXPECT_EQ(q.crop_y, static_cast<int>(std::nearbyint((q.resized_h - 224) / 2.0)));
  CenterCropPlan r = CenterCropRectFor(256, 343, 256, 224);
  EXPECT_EQ(r.resized_h, 343);
  EXPECT_EQ(r.crop_y, 60);

  // Square, and a crop larger than the resized image (clamped).
  CenterCropPlan s = CenterCropRectFor(100, 100, 64, 80);
  EXPECT_EQ(s.resized_w, 64);
  EXPECT_EQ(s.crop_w, 64);
  EXPECT_EQ(s.crop_x, 0);
  EXPECT_EQ(s.source_rect.w, 100);
}

// ---- Resize ------------------------------------------------------------------------------

// Straightforward double-precision PIL ImagingResample (bilinear, box, window), both passes
// in float without intermediate rounding: the reference for the SIMD kernel.
std::vector<double> ReferenceResize(const DecodedImage& img, double bx, double by, double bw,
                                    double bh, int wx0, int wx1, int wy0, int wy1, int ow, int oh) {
  auto coeffs = [](double in0, double in_w, int w0, int w1, int out, std::vector<int>* first,
                   std::vector<std::vector<double>>* ws) {
    const double scale = in_w / out, fs = std::max(1.0, scale), support = fs;
    for (int i = 0; i < out; ++i) {
      const double center = in0 + (i + 0.5) * scale;
      int xmin = std::max(w0, static_cast<int>(std::floor(center - support + 0.5)));
      int xmax = std::min(w1, static_cast<int>(std::floor(center + support + 0.5)));
      std::vector<double> k;
      double sum = 0;
      for (int x = xmin; x < xmax; ++x) {
        double t = std::fabs((x - center + 0.5) / fs);
        k.push_back(t < 1 ? 1 - t : 0);
        sum += k.back();
      }
      for (double& v : k) v /= sum;
      first->push_back(xmin);
      ws->push_back(k);
    }
  };
  std::vector<int> fx, fy;
  std::vector<std::vector<double>> wx, wy;
  coeffs(bx, bw, wx0, wx1, ow, &fx, &wx);
  coeffs(by, bh, wy0, wy1, oh, &fy, &wy);
  std::vector<double> out(static_cast<size_t>(ow) * oh * 3);
  for (int oy = 0; oy < oh; ++oy) {
    for (int ox = 0; ox < ow; ++ox) {
      for (int c = 0; c < 3; ++c) {
        double acc = 0;
        for (size_t ky = 0; ky < wy[oy].size(); ++ky) {
          for (size_t kx = 0; kx < wx[ox].size(); ++kx) {
            acc += wy[oy][ky] * wx[ox][kx] *
                   img.pixels[((fy[oy] + ky) * static_cast<size_t>(img.width) + fx[ox] + kx) * 3 + c];
          }
        }
        out[(static_cast<size_t>(oy) * ow + ox) * 3 + c] = acc;
      }
    }
  }
  return out;
}

OutputSpec Spec(int w, int h, OutputLayout layout, bool unit = false) {
  OutputSpec s;
  s.width = w;
  s.height = h;
  s.layout = layout;
  if (unit) {
    for (int c = 0; c < 3; ++c) {
      s.mean[c] = 0;
      s.std[c] = 1;
    }
  }
  return s;
}

TEST(Resize, SameSizeIsIdentityAndFlipMirrors) {
  const int w = 37, h = 29;
  DecodedImage img = FromPixels(SyntheticRgb(w, h, 1), w, h);
  ResizeScratch scratch;
  std::vector<uint8_t> out(w * h * 3);
  ResizeFlipNormalize(img, 0, 0, w, h, false, Spec(w, h, OutputLayout::kUint8HWC), out.data(),
                      &scratch);
  EXPECT_EQ(out, img.pixels);
  ResizeFlipNormalize(img, 0, 0, w, h, true, Spec(w, h, OutputLayout::kUint8HWC), out.data(),
                      &scratch);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(out[(y * w + x) * 3 + c], img.pixels[(y * w + (w - 1 - x)) * 3 + c]);
      }
    }
  }
}

TEST(Resize, MatchesReferenceForManyBoxes) {
  const int w = 157, h = 111;
  DecodedImage img = FromPixels(SyntheticRgb(w, h, 2), w, h);
  ResizeScratch scratch;
  Rng rng(5);
  for (int t = 0; t < 40; ++t) {
    const int ow = static_cast<int>(rng.Int(1, 90)), oh = static_cast<int>(rng.Int(1, 90));
    const double bw = rng.Uniform(1.0, w), bh = rng.Uniform(1.0, h);
    const double bx = rng.Uniform(0, w - bw), by = rng.Uniform(0, h - bh);
    const bool flip = t % 2 == 1;
    std::vector<float> out(static_cast<size_t>(ow) * oh * 3);
    ResizeFlipNormalize(img, bx, by, bw, bh, flip, Spec(ow, oh, OutputLayout::kFloatCHW, true),
                        out.data(), &scratch);
    const int wx0 = static_cast<int>(std::floor(bx + 1e-6)), wx1 = static_cast<int>(std::ceil(bx + bw - 1e-6));
    const int wy0 = static_cast<int>(std::floor(by + 1e-6)), wy1 = static_cast<int>(std::ceil(by + bh - 1e-6));
    auto ref = ReferenceResize(img, bx, by, bw, bh, wx0, wx1, wy0, wy1, ow, oh);
    double max_err = 0;
    for (int y = 0; y < oh; ++y) {
      for (int x = 0; x < ow; ++x) {
        const int sx = flip ? ow - 1 - x : x;
        for (int c = 0; c < 3; ++c) {
          const double got = out[(static_cast<size_t>(c) * oh + y) * ow + x];
          max_err = std::max(max_err, std::fabs(got - ref[(static_cast<size_t>(y) * ow + sx) * 3 + c]));
        }
      }
    }
    EXPECT_LT(max_err, 1e-3) << ow << "x" << oh << " from " << bw << "x" << bh;
  }
}

TEST(Resize, NormalizesAndWritesChw) {
  // A constant image stays constant; CHW planes hold (v - mean) / std per channel.
  const int w = 20, h = 10;
  std::vector<uint8_t> px(w * h * 3);
  for (int i = 0; i < w * h; ++i) {
    px[i * 3] = 10;
    px[i * 3 + 1] = 128;
    px[i * 3 + 2] = 250;
  }
  DecodedImage img = FromPixels(px, w, h);
  OutputSpec spec = Spec(7, 5, OutputLayout::kFloatCHW);
  std::vector<float> out(7 * 5 * 3);
  ResizeScratch scratch;
  ResizeFlipNormalize(img, 2.5, 1.25, 13.3, 7.1, false, spec, out.data(), &scratch);
  const float v[3] = {10, 128, 250};
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 35; ++i) {
      EXPECT_NEAR(out[c * 35 + i], (v[c] - spec.mean[c]) / spec.std[c], 1e-4);
    }
  }
  EXPECT_EQ(spec.bytes(), 7u * 5 * 3 * 4);
}

TEST(Resize, HalvingAveragesWithTriangleWeights) {
  // Downscale by exactly 2: support 2, taps at 2i-1..2i+2 with weights 1/8, 3/8, 3/8, 1/8.
  const int w = 16, h = 1;
  std::vector<uint8_t> px(w * 3);
  for (int x = 0; x < w; ++x) px[x * 3] = px[x * 3 + 1] = px[x * 3 + 2] = static_cast<uint8_t>(x * 16);
  DecodedImage img = FromPixels(px, w, h);
  std::vector<float> out(8 * 3);
  ResizeScratch scratch;
  ResizeFlipNormalize(img, 0, 0, w, 1, false, Spec(8, 1, OutputLayout::kFloatCHW, true), out.data(),
                      &scratch);
  for (int i = 1; i < 7; ++i) {
    const double expect = (1 * px[(2 * i - 1) * 3] + 3 * px[2 * i * 3] + 3 * px[(2 * i + 1) * 3] +
                           1 * px[(2 * i + 2) * 3]) / 8.0;
    EXPECT_NEAR(out[i], expect, 1e-3);
  }
  // At the border the taps are clipped to the box and renormalised: (3*p0 + 3*p1 + p2) / 7.
  EXPECT_NEAR(out[0], (3.0 * px[0] + 3.0 * px[3] + px[6]) / 7.0, 1e-3);
}

TEST(Resize, WindowLetsTheFilterReadOutsideTheBox) {
  // Resize-then-crop reads pixels outside the crop box; crop-then-resize does not.
  const int w = 64, h = 64;
  DecodedImage img = FromPixels(SyntheticRgb(w, h, 3), w, h);
  ResizeScratch scratch;
  std::vector<float> inside(16 * 16 * 3), window(16 * 16 * 3);
  OutputSpec spec = Spec(16, 16, OutputLayout::kFloatCHW, true);
  ResizeFlipNormalize(img, 8, 8, 32, 32, false, spec, inside.data(), &scratch);
  ResizeFlipNormalizeWindow(img, DecodedRect{8, 8, 32, 32}, CropRect{0, 0, w, h}, false, spec,
                            window.data(), &scratch);
  auto ref_in = ReferenceResize(img, 8, 8, 32, 32, 8, 40, 8, 40, 16, 16);
  auto ref_win = ReferenceResize(img, 8, 8, 32, 32, 0, w, 0, h, 16, 16);
  double e_in = 0, e_win = 0, differ = 0;
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 16; ++x) {
      const size_t r = (static_cast<size_t>(y) * 16 + x) * 3, o = static_cast<size_t>(y) * 16 + x;
      e_in = std::max(e_in, std::fabs(inside[o] - ref_in[r]));
      e_win = std::max(e_win, std::fabs(window[o] - ref_win[r]));
      differ = std::max(differ, static_cast<double>(std::fabs(inside[o] - window[o])));
    }
  }
  EXPECT_LT(e_in, 1e-3);
  EXPECT_LT(e_win, 1e-3);
  EXPECT_GT(differ, 0.5);  // the border pixels see different taps
}

TEST(Resize, DctScaledRegionDecodeStaysCloseToFullDecode) {
  // The pipeline path (region decode + DCT scale + fractional box) against full-size decode
  // + crop-then-resize of the same crop.
  const int w = 640, h = 480;
  auto px = SyntheticRgb(w, h, 4);
  std::vector<uint8_t> jpg;
  JpegEncodeOptions o;
  o.quality = 92;
  ASSERT_TRUE(EncodeJpegEx(px.data(), w, h, o, &jpg).ok());
  OutputSpec spec = Spec(64, 64, OutputLayout::kUint8HWC);
  RandomResizedCropParams p;
  ResizeScratch scratch;
  DecodedImage fast, exact;
  int scaled = 0;
  for (int i = 0; i < 30; ++i) {
    Rng rng(21, 0, i);
    CropRect c = RandomResizedCropRect(w, h, p, rng);
    ASSERT_TRUE(DecodeImage(jpg.data(), jpg.size(), CropDecodeRequest(c, spec), &fast).ok());
    ASSERT_TRUE(DecodeImage(jpg.data(), jpg.size(), CropDecodeRequest(c, spec, false), &exact).ok());
    ASSERT_EQ(exact.scale_num, 8);
    ASSERT_EQ(exact.width, c.w);
    scaled += fast.scale_num < 8;
    std::vector<uint8_t> a(spec.bytes()), b(spec.bytes());
    ResizeCropToOutput(fast, c, i % 2, spec, a.data(), &scratch);
    ResizeCropToOutput(exact, c, i % 2, spec, b.data(), &scratch);
    EXPECT_LT(testing::MeanAbsDiff(a.data(), b.data(), a.size()), 3.0)
        << "crop " << c.w << "x" << c.h << " scale " << fast.scale_num;
  }
  EXPECT_GT(scaled, 20);
}

TEST(Resize, CenterCropPlanMatchesWholeImageResizeThenCrop) {
  const int w = 150, h = 110;
  DecodedImage img = FromPixels(SyntheticRgb(w, h, 5), w, h);
  CenterCropPlan plan = CenterCropRectFor(w, h, 64, 56);
  // Reference: resize the whole image to resized_w x resized_h, then cut the crop.
  auto whole = ReferenceResize(img, 0, 0, w, h, 0, w, 0, h, plan.resized_w, plan.resized_h);
  // Ours: decode (here: copy) only source_rect, then resize the box with the whole
  // decoded region as the window.
  DecodedImage part;
  const CropRect& r = plan.source_rect;
  part.width = r.w;
  part.height = r.h;
  part.offset_x = r.x;
  part.offset_y = r.y;
  part.crop = r;
  part.pixels.resize(static_cast<size_t>(r.w) * r.h * 3);
  for (int y = 0; y < r.h; ++y) {
    std::memcpy(&part.pixels[static_cast<size_t>(y) * r.w * 3],
                &img.pixels[((static_cast<size_t>(y) + r.y) * w + r.x) * 3], r.w * 3);
  }
  std::vector<float> out(56 * 56 * 3);
  ResizeScratch scratch;
  ResizeCenterCropToOutput(part, plan, false, Spec(56, 56, OutputLayout::kFloatCHW, true),
                           out.data(), &scratch);
  double max_err = 0;
  for (int y = 0; y < 56; ++y) {
    for (int x = 0; x < 56; ++x) {
      for (int c = 0; c < 3; ++c) {
        const double ref = whole[((static_cast<size_t>(y) + plan.crop_y) * plan.resized_w + x +
                                  plan.crop_x) * 3 + c];
        max_err = std::max(max_err, std::fabs(out[(c * 56 + y) * 56 + x] - ref));
      }
    }
  }
  EXPECT_LT(max_err, 1e-3);
}

}  // namespace
}  // namespace stoker
