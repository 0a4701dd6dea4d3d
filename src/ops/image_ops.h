// Image augmentation ops with torchvision's semantics.
#pragma once

#include <cstdint>

#include "codec/image.h"
#include "core/random.h"

namespace stoker {

struct RandomResizedCropParams {
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
};

// torchvision.transforms.RandomResizedCrop.get_params: 10 attempts at a random area in
// [scale_min, scale_max] and log-uniform aspect ratio, then the center-crop fallback
// (ratio clamped into [ratio_min, ratio_max]).
CropRect RandomResizedCropRect(int width, int height, const RandomResizedCropParams& p,
                               Rng& rng);

// torchvision Resize(resize_short) + CenterCrop(crop): the crop rect in source
// coordinates and the size the whole image is resized to first.
struct CenterCropPlan {
  CropRect source_rect;       // region of the source that ends up in the output
  int resized_w = 0, resized_h = 0;
};
CenterCropPlan CenterCropRectFor(int width, int height, int resize_short, int crop);

enum class OutputLayout { kFloatCHW, kUint8HWC };

struct OutputSpec {
  int width = 224, height = 224;
  OutputLayout layout = OutputLayout::kFloatCHW;
  float mean[3] = {0.485f * 255, 0.456f * 255, 0.406f * 255};  // in 0..255 units
  float std[3] = {0.229f * 255, 0.224f * 255, 0.225f * 255};
  size_t bytes() const {
    return static_cast<size_t>(width) * height * 3 *
           (layout == OutputLayout::kFloatCHW ? sizeof(float) : 1);
  }
};

// Resizes region `src_rect` (in the coordinates of `img`, possibly fractional because of
// DCT scaling) of the decoded image to spec.width x spec.height with antialiased bilinear
// interpolation (PIL's / torchvision's antialias=True filter), optionally flips
// horizontally, and writes float32 CHW normalized ((x - mean) / std) or uint8 HWC into
// `dst` (spec.bytes() bytes). Thread-safe; `scratch` is reused between calls.
struct ResizeScratch;
void ResizeFlipNormalize(const DecodedImage& img, double src_x, double src_y, double src_w,
                         double src_h, bool flip, const OutputSpec& spec, void* dst,
                         ResizeScratch* scratch);

// Per-thread scratch buffers for ResizeFlipNormalize (kept between calls).
struct ResizeScratch {
  std::vector<float> tmp;
  std::vector<int32_t> idx;
  std::vector<float> weights;
};

}  // namespace stoker
