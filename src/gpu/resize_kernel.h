// The fused crop + resize + flip + normalize of the GPU path, written once for the CUDA
// kernel (resize_kernel.cu) and for the host (RunResizeJobsOnHost, the tests' oracle and
// the fake CUDA table's "launch"). It computes, per output pixel, exactly the filter of
// ops/image_ops.cc's ResizeFlipNormalizeWindow (PIL's antialiased triangle filter over a
// box with taps limited to a window, renormalised at the window's edges), as one 2-D pass
// instead of two 1-D passes: same taps and weights, float accumulation in another order,
// so results agree to float rounding (see docs/gpu.md for the tolerance).
//
// Parameters come from the CPU path's own plan (ops::CropResizePlan /
// CenterCropResizePlan on the full-size decode), so crops are identical by construction.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__) || defined(__CUDA__)
#define STOKER_CUDA_COMPILE 1
#define STOKER_HD __host__ __device__ __forceinline__
#else
#define STOKER_HD inline
#include <cmath>
#endif

namespace stoker::gpu {

// One image of a batch (POD: copied to the device as is).
struct ResizeJob {
  uint64_t src = 0;        // decoded RGB, interleaved, `src_pitch` bytes per row
  uint64_t dst = 0;        // the image's slot in the output batch
  int32_t src_w = 0, src_h = 0, src_pitch = 0;
  int32_t win_x0 = 0, win_y0 = 0, win_x1 = 0, win_y1 = 0;  // taps limited to this window
  double box_x = 0, box_y = 0, box_w = 0, box_h = 0;        // the box resized to the output
  float min_support = 1.0f;
  int32_t flip = 0;
};

// The whole batch's output (by value as a kernel argument).
struct ResizeLaunch {
  int32_t out_w = 0, out_h = 0;
  int32_t layout_uint8 = 0;   // 0: float32 CHW normalized; 1: uint8 HWC
  float scale[3] = {1, 1, 1}, bias[3] = {0, 0, 0};
  int32_t num_jobs = 0;
};

// The host fills these and the device reads them: one layout for both compilers.
static_assert(sizeof(ResizeJob) == 88, "ResizeJob layout");
static_assert(sizeof(ResizeLaunch) == 40, "ResizeLaunch layout");

STOKER_HD double KernelTriangle(double x) {
  x = x < 0 ? -x : x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// PIL's precompute_coeffs for output index `o` along one axis: first tap, tap count and
// the normalisation 1/sum (0 when the nearest window pixel is used instead).
struct Taps {
  int first = 0, n = 1;
  double center = 0, ss = 1, inv_sum = 0;
};
STOKER_HD Taps AxisTaps(double in0, double in_w, int win0, int win1, int out_size,
                        double min_support, int o) {
  Taps t;
  const double w = in_w > 0 ? in_w : 1e-6;
  const double scale = w / out_size;
  const double filterscale = scale > min_support ? scale : min_support;
  const double support = filterscale;
  t.ss = 1.0 / filterscale;
  const int ksize = static_cast<int>(ceil(filterscale)) * 2 + 1;
  t.center = in0 + (o + 0.5) * scale;
  int xmin = static_cast<int>(floor(t.center - support + 0.5));
  int xmax = static_cast<int>(floor(t.center + support + 0.5));
  xmin = xmin > win0 ? xmin : win0;
  xmax = xmax < win1 ? xmax : win1;
  int n = xmax - xmin;
  if (n > ksize) n = ksize;
  double sum = 0;
  for (int x = 0; x < n; ++x) sum += KernelTriangle((x + xmin - t.center + 0.5) * t.ss);
  if (n <= 0 || sum <= 0.0) {
    int c = static_cast<int>(floor(t.center));
    c = c < win0 ? win0 : c > win1 - 1 ? win1 - 1 : c;
    t.first = c;
    t.n = 1;
    t.inv_sum = 0;
  } else {
    t.first = xmin;
    t.n = n;
    t.inv_sum = 1.0 / sum;
  }
  return t;
}

STOKER_HD float TapWeight(const Taps& t, int k) {
  if (t.inv_sum == 0) return 1.0f;
  return static_cast<float>(KernelTriangle((k + t.first - t.center + 0.5) * t.ss) * t.inv_sum);
}

// The window clipped to the image and never empty (as ResizeFlipNormalizeWindow does).
STOKER_HD void ClipWindow(const ResizeJob& j, int* x0, int* y0, int* x1, int* y1) {
  int a = j.win_x0 < 0 ? 0 : j.win_x0 > j.src_w - 1 ? j.src_w - 1 : j.win_x0;
  int b = j.win_y0 < 0 ? 0 : j.win_y0 > j.src_h - 1 ? j.src_h - 1 : j.win_y0;
  int c = j.win_x1 < a + 1 ? a + 1 : j.win_x1 > j.src_w ? j.src_w : j.win_x1;
  int d = j.win_y1 < b + 1 ? b + 1 : j.win_y1 > j.src_h ? j.src_h : j.win_y1;
  *x0 = a;
  *y0 = b;
  *x1 = c;
  *y1 = d;
}

// Output pixel (ox, oy) of job `j` (before the flip), all three channels, written to the
// batch slot. `src` is the job's decoded image as the caller can address it.
STOKER_HD void ResizePixel(const ResizeJob& j, const ResizeLaunch& L, const uint8_t* src,
                           void* dst, int ox, int oy) {
  int wx0, wy0, wx1, wy1;
  ClipWindow(j, &wx0, &wy0, &wx1, &wy1);
  const Taps h = AxisTaps(j.box_x, j.box_w, wx0, wx1, L.out_w, j.min_support, ox);
  const Taps v = AxisTaps(j.box_y, j.box_h, wy0, wy1, L.out_h, j.min_support, oy);
  float acc[3] = {0, 0, 0};
  for (int ky = 0; ky < v.n; ++ky) {
    const float wy = TapWeight(v, ky);
    const uint8_t* row = src + static_cast<int64_t>(v.first + ky) * j.src_pitch;
    float r = 0, g = 0, b = 0;
    for (int kx = 0; kx < h.n; ++kx) {
      const float wx = TapWeight(h, kx);
      const uint8_t* p = row + 3 * (h.first + kx);
      r += wx * p[0];
      g += wx * p[1];
      b += wx * p[2];
    }
    acc[0] += wy * r;
    acc[1] += wy * g;
    acc[2] += wy * b;
  }
  const int dx = j.flip ? L.out_w - 1 - ox : ox;
  if (L.layout_uint8) {
    uint8_t* d = static_cast<uint8_t*>(dst) + (static_cast<int64_t>(oy) * L.out_w + dx) * 3;
    for (int c = 0; c < 3; ++c) {
      const float x = acc[c] + 0.5f;
      d[c] = x <= 0.f ? 0 : x >= 255.f ? 255 : static_cast<uint8_t>(x);
    }
  } else {
    float* d = static_cast<float*>(dst);
    const int64_t plane = static_cast<int64_t>(L.out_w) * L.out_h;
    for (int c = 0; c < 3; ++c)
      d[c * plane + static_cast<int64_t>(oy) * L.out_w + dx] = acc[c] * L.scale[c] + L.bias[c];
  }
}

// Name of the kernel in the PTX module: one thread per output pixel; grid.y = job.
//   extern "C" __global__ void stoker_resize_normalize(const ResizeJob* jobs, ResizeLaunch L)
inline constexpr const char* kResizeKernelName = "stoker_resize_normalize";
inline constexpr int kResizeBlock = 256;

#if !defined(STOKER_CUDA_COMPILE)
// The kernel on the host: every job's every pixel, with device pointers taken as host
// addresses (the tests' fake CUDA table allocates "device" memory on the host).
void RunResizeJobsOnHost(const ResizeJob* jobs, const ResizeLaunch& L);
#endif

}  // namespace stoker::gpu

#if !defined(STOKER_CUDA_COMPILE)
#include "ops/image_ops.h"
namespace stoker::gpu {
// The job of one src_w x src_h RGB image from the CPU path's plan (box and tap window),
// without its src/dst addresses.
ResizeJob JobFromPlan(const ResizePlan& plan, int src_w, int src_h, bool flip);
}  // namespace stoker::gpu
#endif
