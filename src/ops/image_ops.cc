#include "ops/image_ops.h"

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace stoker {

// ---- crop parameters -------------------------------------------------------------------

namespace {
// Python's round(): half to even (the default floating-point rounding mode).
inline int PyRound(double v) { return static_cast<int>(std::nearbyint(v)); }
}  // namespace

CropRect RandomResizedCropRect(int width, int height, const RandomResizedCropParams& p,
                               Rng& rng) {
  const double area = static_cast<double>(height) * width;
  const double log_r0 = std::log(p.ratio_min), log_r1 = std::log(p.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(p.scale_min, p.scale_max);
    const double aspect = std::exp(rng.Uniform(log_r0, log_r1));
    const int w = PyRound(std::sqrt(target_area * aspect));
    const int h = PyRound(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const int i = static_cast<int>(rng.Int(0, height - h));
      const int j = static_cast<int>(rng.Int(0, width - w));
      return CropRect{j, i, w, h};
    }
  }
  // Fallback: central crop with the ratio clamped into [ratio_min, ratio_max].
  const double in_ratio = static_cast<double>(width) / height;
  const double rmin = std::min(p.ratio_min, p.ratio_max), rmax = std::max(p.ratio_min, p.ratio_max);
  int w = width, h = height;
  if (in_ratio < rmin) {
    w = width;
    h = PyRound(w / rmin);
  } else if (in_ratio > rmax) {
    h = height;
    w = PyRound(h * rmax);
  }
  return CropRect{(width - w) / 2, (height - h) / 2, w, h};
}

CenterCropPlan CenterCropRectFor(int width, int height, int resize_short, int crop) {
  CenterCropPlan plan;
  // torchvision _compute_resized_output_size for an int size (no max_size).
  const bool w_short = width <= height;
  const int s = w_short ? width : height;
  const int l = w_short ? height : width;
  const int new_short = resize_short;
  const int new_long = static_cast<int>(static_cast<double>(resize_short) * l / s);
  plan.resized_w = w_short ? new_short : new_long;
  plan.resized_h = w_short ? new_long : new_short;
  // torchvision CenterCrop (padding when the crop is larger is not reproduced: clamped).
  plan.crop_w = std::min(crop, plan.resized_w);
  plan.crop_h = std::min(crop, plan.resized_h);
  plan.crop_x = PyRound((plan.resized_w - plan.crop_w) / 2.0);
  plan.crop_y = PyRound((plan.resized_h - plan.crop_h) / 2.0);
  const double sx = static_cast<double>(width) / plan.resized_w;
  const double sy = static_cast<double>(height) / plan.resized_h;
  plan.src_x = plan.crop_x * sx;
  plan.src_y = plan.crop_y * sy;
  plan.src_w = plan.crop_w * sx;
  plan.src_h = plan.crop_h * sy;
  // The filter reads up to max(1, scale) pixels beyond an output pixel's center; one more
  // pixel absorbs the +0.5 rounding of the tap bounds.
  const int gx = static_cast<int>(std::ceil(std::max(1.0, sx))) + 1;
  const int gy = static_cast<int>(std::ceil(std::max(1.0, sy))) + 1;
  const int x0 = std::max(0, static_cast<int>(std::floor(plan.src_x)) - gx);
  const int y0 = std::max(0, static_cast<int>(std::floor(plan.src_y)) - gy);
  const int x1 = std::min(width, static_cast<int>(std::ceil(plan.src_x + plan.src_w)) + gx);
  const int y1 = std::min(height, static_cast<int>(std::ceil(plan.src_y + plan.src_h)) + gy);
  plan.source_rect = CropRect{x0, y0, x1 - x0, y1 - y0};
  return plan;
}

// ---- resampling ------------------------------------------------------------------------

namespace {

// After DCT-domain downscaling the decoded crop can be about the output's size, and PIL's
// rule (support max(1, scale)) would leave the filter nothing to do: the result would be
// libjpeg's reduced IDCT alone, sharper than the triangle filter torchvision applies to
// the full-size image. A support of at least 1.25 decoded pixels on DCT-scaled decodes
// makes up for it at no decode cost. Measured (scikit-image photographs re-encoded at
// quality 90, decoded at 1/2, resized by r more; mean levels off torchvision): support
// 1.0: 1.2-2.3 at r = 1.0, 0.9-1.25 at r = 1.1; support 1.25: 0.9-1.25 at r = 1.0,
// 1.0-1.35 at 1.1, 0.7-1.0 at 1.25, unchanged from 1.5 on; 1.5 and more is worse.
constexpr double kDctMinSupport = 1.25;

inline double Triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// PIL's precompute_coeffs (Resample.c) for the bilinear filter over box [in0, in0 + in_w)
// with taps limited to [win0, win1). Writes first tap and tap count per output pixel to
// `bounds` and `ksize` weights per output pixel to `w`. Returns nothing; ksize from
// KernelSize().
int KernelSize(double in_w, int out_size, double min_support) {
  const double filterscale = std::max(min_support, in_w / out_size);
  return static_cast<int>(std::ceil(filterscale)) * 2 + 1;
}

void PrecomputeCoeffs(double in0, double in_w, int win0, int win1, int out_size, int ksize,
                      double min_support, int32_t* bounds, float* w) {
  const double scale = in_w / out_size;
  const double filterscale = std::max(min_support, scale);
  const double support = 1.0 * filterscale;
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    int xmin = static_cast<int>(std::floor(center - support + 0.5));
    int xmax = static_cast<int>(std::floor(center + support + 0.5));
    xmin = std::max(xmin, win0);
    xmax = std::min(xmax, win1);
    int n = xmax - xmin;
    if (n > ksize) n = ksize;
    double sum = 0;
    for (int x = 0; x < n; ++x) sum += Triangle((x + xmin - center + 0.5) * ss);
    float* wk = w + static_cast<size_t>(xx) * ksize;
    if (n <= 0 || sum <= 0.0) {
      // The box lies outside the window here: take the nearest window pixel.
      xmin = std::clamp(static_cast<int>(std::floor(center)), win0, win1 - 1);
      n = 1;
      wk[0] = 1.0f;
      for (int x = 1; x < ksize; ++x) wk[x] = 0.0f;
    } else {
      for (int x = 0; x < ksize; ++x) {
        wk[x] = x < n ? static_cast<float>(Triangle((x + xmin - center + 0.5) * ss) / sum) : 0.0f;
      }
    }
    bounds[2 * xx] = xmin;
    bounds[2 * xx + 1] = n;
  }
}

// dst[i] = src[i] as float, for i < n.
void RowToFloat(const uint8_t* src, int n, float* dst) {
  int i = 0;
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  for (; i + 16 <= n; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i lo = _mm_unpacklo_epi8(v, zero), hi = _mm_unpackhi_epi8(v, zero);
    _mm_storeu_ps(dst + i, _mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, zero)));
    _mm_storeu_ps(dst + i + 4, _mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, zero)));
    _mm_storeu_ps(dst + i + 8, _mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, zero)));
    _mm_storeu_ps(dst + i + 12, _mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, zero)));
  }
#endif
  for (; i < n; ++i) dst[i] = src[i];
}

// Horizontal taps over one source row `in` (RGB floats from column hx0, padded by at
// least 3 * ksize + 4 zero floats), written planar (R, G, B rows of `ow` floats) into
// `out`, flipped if asked. (Unrolling over a compile-time kernel size was measured
// slower: it applies all ksize taps where most pixels need fewer.)
void HorizontalPass(const float* in, int hx0, const int32_t* bounds, const float* w, int ksize,
                    int ow, bool flip, float* out) {
  float* r = out;
  float* g = out + ow;
  float* b = out + 2 * ow;
  for (int ox = 0; ox < ow; ++ox) {
    const float* t = in + static_cast<size_t>(bounds[2 * ox] - hx0) * 3;
    const int n = bounds[2 * ox + 1];
    const float* wk = w + static_cast<size_t>(ox) * ksize;
    const int dx = flip ? ow - 1 - ox : ox;
#if defined(__SSE2__)
    __m128 acc = _mm_mul_ps(_mm_loadu_ps(t), _mm_load1_ps(wk));
    for (int k = 1; k < n; ++k) {
      acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(t + 3 * k), _mm_load1_ps(wk + k)));
    }
    r[dx] = _mm_cvtss_f32(acc);
    g[dx] = _mm_cvtss_f32(_mm_shuffle_ps(acc, acc, 1));
    b[dx] = _mm_cvtss_f32(_mm_shuffle_ps(acc, acc, 2));
#else
    float pr = 0, pg = 0, pb = 0;
    for (int k = 0; k < n; ++k) {
      pr += t[3 * k] * wk[k];
      pg += t[3 * k + 1] * wk[k];
      pb += t[3 * k + 2] * wk[k];
    }
    r[dx] = pr;
    g[dx] = pg;
    b[dx] = pb;
#endif
  }
}

// out[i] = (sum_k w[k] * rows[k][i]) * scale + bias, for i < n.
void VerticalPass(const float* const* rows, const float* w, int taps, int n, float scale,
                  float bias, float* out) {
  int i = 0;
#if defined(__SSE2__)
  const __m128 vs = _mm_set1_ps(scale), vb = _mm_set1_ps(bias);
  for (; i + 8 <= n; i += 8) {
    __m128 w0 = _mm_set1_ps(w[0]);
    __m128 a0 = _mm_mul_ps(_mm_loadu_ps(rows[0] + i), w0);
    __m128 a1 = _mm_mul_ps(_mm_loadu_ps(rows[0] + i + 4), w0);
    for (int k = 1; k < taps; ++k) {
      const __m128 wk = _mm_set1_ps(w[k]);
      a0 = _mm_add_ps(a0, _mm_mul_ps(_mm_loadu_ps(rows[k] + i), wk));
      a1 = _mm_add_ps(a1, _mm_mul_ps(_mm_loadu_ps(rows[k] + i + 4), wk));
    }
    _mm_storeu_ps(out + i, _mm_add_ps(_mm_mul_ps(a0, vs), vb));
    _mm_storeu_ps(out + i + 4, _mm_add_ps(_mm_mul_ps(a1, vs), vb));
  }
#endif
  for (; i < n; ++i) {
    float acc = 0;
    for (int k = 0; k < taps; ++k) acc += w[k] * rows[k][i];
    out[i] = acc * scale + bias;
  }
}

}  // namespace

void ResizeFlipNormalizeWindow(const DecodedImage& img, const DecodedRect& box,
                               const CropRect& window_in, bool flip, const OutputSpec& spec,
                               void* dst, ResizeScratch* scratch) {
  const int ow = spec.width, oh = spec.height;
  if (ow <= 0 || oh <= 0 || img.width <= 0 || img.height <= 0) return;
  // Window clipped to the image (never empty).
  int wx0 = std::clamp(window_in.x, 0, img.width - 1);
  int wy0 = std::clamp(window_in.y, 0, img.height - 1);
  int wx1 = std::clamp(window_in.x + window_in.w, wx0 + 1, img.width);
  int wy1 = std::clamp(window_in.y + window_in.h, wy0 + 1, img.height);
  const double bw = box.w > 0 ? box.w : 1e-6, bh = box.h > 0 ? box.h : 1e-6;

  // A DCT-scaled decode (scale_num < 8) keeps the filter at least kDctMinSupport decoded
  // pixels wide: see kDctMinSupport.
  const double min_support = img.scale_num < 8 ? kDctMinSupport : 1.0;
  const int kh = KernelSize(bw, ow, min_support), kv = KernelSize(bh, oh, min_support);
  scratch->idx.resize(2 * static_cast<size_t>(ow) + 2 * static_cast<size_t>(oh));
  scratch->weights.resize(static_cast<size_t>(ow) * kh + static_cast<size_t>(oh) * kv);
  int32_t* hb = scratch->idx.data();
  int32_t* vb = hb + 2 * ow;
  float* hw = scratch->weights.data();
  float* vw = hw + static_cast<size_t>(ow) * kh;
  PrecomputeCoeffs(box.x, bw, wx0, wx1, ow, kh, min_support, hb, hw);
  PrecomputeCoeffs(box.y, bh, wy0, wy1, oh, kv, min_support, vb, vw);

  int hx0 = hb[0], hx1 = hb[0] + hb[1];
  for (int ox = 1; ox < ow; ++ox) {
    hx0 = std::min(hx0, hb[2 * ox]);
    hx1 = std::max(hx1, hb[2 * ox] + hb[2 * ox + 1]);
  }
  // Scratch floats: one source row as float (+ padding for the 4-wide loads), a ring of
  // kv horizontally filtered rows (planar, 3 * ow each) and one output row (3 * ow).
  const int n_in = (hx1 - hx0) * 3;
  const size_t row3 = static_cast<size_t>(ow) * 3;
  const size_t in_size = static_cast<size_t>(n_in) + 3 * static_cast<size_t>(kh) + 4;
  scratch->tmp.resize(in_size + row3 * kv + row3);
  float* in_row = scratch->tmp.data();
  float* ring = in_row + in_size;
  float* out_row = ring + row3 * kv;
  std::fill(in_row + n_in, in_row + in_size, 0.0f);

  float scale[3], bias[3];
  for (int c = 0; c < 3; ++c) {
    if (spec.layout == OutputLayout::kFloatCHW) {
      scale[c] = 1.0f / spec.std[c];
      bias[c] = -spec.mean[c] / spec.std[c];
    } else {
      scale[c] = 1.0f;
      bias[c] = 0.0f;
    }
  }
  const size_t plane = static_cast<size_t>(ow) * oh;
  float* fdst = static_cast<float*>(dst);
  uint8_t* bdst = static_cast<uint8_t*>(dst);

  const size_t stride = static_cast<size_t>(img.width) * 3;
  const uint8_t* base = img.pixels.data() + static_cast<size_t>(hx0) * 3;
  const float* small_rows[64];
  std::vector<const float*> big_rows;  // only for downscales by more than ~30x
  const float** rows = small_rows;
  if (kv > 64) {
    big_rows.resize(kv);
    rows = big_rows.data();
  }
  int done_hi = -1;  // source rows < done_hi are in the ring (the last kv of them)
  for (int oy = 0; oy < oh; ++oy) {
    const int y0 = vb[2 * oy], taps = vb[2 * oy + 1];
    if (y0 > done_hi) done_hi = y0;
    for (int y = done_hi; y < y0 + taps; ++y) {
      RowToFloat(base + static_cast<size_t>(y) * stride, n_in, in_row);
      HorizontalPass(in_row, hx0, hb, hw, kh, ow, flip, ring + row3 * (y % kv));
    }
    done_hi = std::max(done_hi, y0 + taps);
    const float* wk = vw + static_cast<size_t>(oy) * kv;
    for (int c = 0; c < 3; ++c) {
      for (int k = 0; k < taps; ++k) rows[k] = ring + row3 * ((y0 + k) % kv) + c * ow;
      float* o = spec.layout == OutputLayout::kFloatCHW
                     ? fdst + c * plane + static_cast<size_t>(oy) * ow
                     : out_row + c * ow;
      VerticalPass(rows, wk, taps, ow, scale[c], bias[c], o);
    }
    if (spec.layout == OutputLayout::kUint8HWC) {
      uint8_t* d = bdst + static_cast<size_t>(oy) * row3;
      for (int x = 0; x < ow; ++x) {
        for (int c = 0; c < 3; ++c) {
          const float v = out_row[c * ow + x] + 0.5f;
          d[x * 3 + c] = v <= 0.f ? 0 : v >= 255.f ? 255 : static_cast<uint8_t>(v);
        }
      }
    }
  }
}

namespace {
// The pixels box [x, x + w) touches, as a window (a box edge within 1e-6 of a pixel edge
// counts as on it: DCT-scaled boxes are computed in floating point).
CropRect TouchedPixels(const DecodedRect& r) {
  constexpr double kEps = 1e-6;
  const int x0 = static_cast<int>(std::floor(r.x + kEps));
  const int y0 = static_cast<int>(std::floor(r.y + kEps));
  const int x1 = static_cast<int>(std::ceil(r.x + r.w - kEps));
  const int y1 = static_cast<int>(std::ceil(r.y + r.h - kEps));
  return CropRect{x0, y0, x1 - x0, y1 - y0};
}

// A box clamped into the decoded pixels (rounding at the image's right/bottom edge).
DecodedRect ClampToImage(const DecodedImage& img, DecodedRect r) {
  const double x0 = std::clamp(r.x, 0.0, static_cast<double>(img.width));
  const double y0 = std::clamp(r.y, 0.0, static_cast<double>(img.height));
  const double x1 = std::clamp(r.x + r.w, x0, static_cast<double>(img.width));
  const double y1 = std::clamp(r.y + r.h, y0, static_cast<double>(img.height));
  return DecodedRect{x0, y0, x1 - x0, y1 - y0};
}
}  // namespace

void ResizeFlipNormalize(const DecodedImage& img, double src_x, double src_y, double src_w,
                         double src_h, bool flip, const OutputSpec& spec, void* dst,
                         ResizeScratch* scratch) {
  const DecodedRect box{src_x, src_y, src_w, src_h};
  ResizeFlipNormalizeWindow(img, box, TouchedPixels(box), flip, spec, dst, scratch);
}

DecodeRequest CropDecodeRequest(const CropRect& source_crop, const OutputSpec& spec,
                                bool allow_dct_scale) {
  DecodeRequest req;
  req.crop = source_crop;
  req.target_w = spec.width;
  req.target_h = spec.height;
  req.allow_dct_scale = allow_dct_scale;
  return req;
}

ResizePlan CropResizePlan(const DecodedImage& img, const CropRect& source_crop) {
  const DecodedRect box = ClampToImage(
      img, SourceToDecoded(img, source_crop.x, source_crop.y, source_crop.w, source_crop.h));
  return ResizePlan{box, TouchedPixels(box)};
}

ResizePlan CenterCropResizePlan(const DecodedImage& img, const CenterCropPlan& plan) {
  const DecodedRect box =
      ClampToImage(img, SourceToDecoded(img, plan.src_x, plan.src_y, plan.src_w, plan.src_h));
  return ResizePlan{box, CropRect{0, 0, img.width, img.height}};
}

void ApplyResizePlan(const DecodedImage& img, const ResizePlan& plan, bool flip,
                     const OutputSpec& spec, void* dst, ResizeScratch* scratch) {
  ResizeFlipNormalizeWindow(img, plan.box, plan.window, flip, spec, dst, scratch);
}

void ResizeCropToOutput(const DecodedImage& img, const CropRect& source_crop, bool flip,
                        const OutputSpec& spec, void* dst, ResizeScratch* scratch) {
  ApplyResizePlan(img, CropResizePlan(img, source_crop), flip, spec, dst, scratch);
}

DecodeRequest CenterCropDecodeRequest(const CenterCropPlan& plan, const OutputSpec& spec,
                                      bool allow_dct_scale) {
  DecodeRequest req;
  req.crop = plan.source_rect;
  req.allow_dct_scale = allow_dct_scale;
  // DecodeImage picks the scale from req.crop (the grown rect) and the target; scale the
  // target so that the box itself, not the grown rect, still covers the output.
  if (plan.src_w > 0 && plan.src_h > 0) {
    req.target_w = static_cast<int>(std::ceil(spec.width * plan.source_rect.w / plan.src_w));
    req.target_h = static_cast<int>(std::ceil(spec.height * plan.source_rect.h / plan.src_h));
  }
  return req;
}

void ResizeCenterCropToOutput(const DecodedImage& img, const CenterCropPlan& plan, bool flip,
                              const OutputSpec& spec, void* dst, ResizeScratch* scratch) {
  ApplyResizePlan(img, CenterCropResizePlan(img, plan), flip, spec, dst, scratch);
}

}  // namespace stoker
