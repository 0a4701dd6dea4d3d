// Image augmentation ops with torchvision's semantics.
#pragma once

#include <cstdint>
#include <vector>

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
//
// torchvision resizes the whole image to resized_w x resized_h and then cuts
// crop x crop at (crop_x, crop_y) = (int(round((resized_w - crop) / 2.0)), ...). The same
// output comes from resizing the fractional source box (src_x, src_y, src_w, src_h) =
// (crop_x, crop_y, crop, crop) * (width / resized_w, height / resized_h) straight to
// crop x crop, with the filter allowed to read pixels just outside the box (as the
// whole-image resize does). `source_rect` is that box rounded outward and grown by the
// filter's support, clipped to the image: the region to decode.
// A crop larger than the resized image (torchvision pads) is clamped to the image.
struct CenterCropPlan {
  CropRect source_rect;       // region of the source that ends up in the output
  int resized_w = 0, resized_h = 0;
  int crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;  // in resized coordinates
  double src_x = 0, src_y = 0, src_w = 0, src_h = 0;   // the exact box in the source
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

// Filter semantics (PIL's ImagingResample with a box, which torchvision uses for PIL
// images): output pixel i samples source position src_x + (i + 0.5) * src_w / width with
// a triangle filter whose support is max(1, src_w / width) pixels; the taps are limited
// to a window of whole pixels and renormalised at its edges. ResizeFlipNormalize uses
// the pixels the box touches, [floor(src_x), ceil(src_x + src_w)), as the window, which
// is torchvision's crop-then-resize (F.resized_crop). ResizeFlipNormalizeWindow takes
// the window explicitly (Resize-then-CenterCrop reads just outside the box).
void ResizeFlipNormalizeWindow(const DecodedImage& img, const DecodedRect& box,
                               const CropRect& window, bool flip, const OutputSpec& spec,
                               void* dst, ResizeScratch* scratch);

// Pipeline helpers: the decode request for a crop that will be resized to `spec`, and
// the resize of that decode (DCT-scaled or not, region-decoded or not) to the output.
// ResizeCropToOutput(img, crop, ...) equals torchvision's
// F.resized_crop(img, crop.y, crop.x, crop.h, crop.w, (spec.height, spec.width)) [+ hflip]
// + Normalize, up to the resampling differences documented in docs/ops.md.
DecodeRequest CropDecodeRequest(const CropRect& source_crop, const OutputSpec& spec,
                                bool allow_dct_scale = true);
void ResizeCropToOutput(const DecodedImage& img, const CropRect& source_crop, bool flip,
                        const OutputSpec& spec, void* dst, ResizeScratch* scratch);
// Resize(resize_short) + CenterCrop(crop) through a CenterCropPlan.
DecodeRequest CenterCropDecodeRequest(const CenterCropPlan& plan, const OutputSpec& spec,
                                      bool allow_dct_scale = true);
void ResizeCenterCropToOutput(const DecodedImage& img, const CenterCropPlan& plan, bool flip,
                              const OutputSpec& spec, void* dst, ResizeScratch* scratch);

// The resize of one decoded sample, worked out once after the decode and applied later
// (the pipeline decodes and augments in separate steps): the box in the decoded image's
// pixel coordinates and the window of decoded pixels the filter may read.
//   CropResizePlan:       F.resized_crop(img, crop) -- the window is the pixels the crop
//                         touches (torchvision crops first, then resizes the crop);
//   CenterCropResizePlan: Resize + CenterCrop -- the window is all decoded pixels (the
//                         plan's source_rect, the filter reads just outside the box as the
//                         whole-image resize does, and clamps where the image ends).
// ApplyResizePlan(img, CropResizePlan(img, c), ...) is ResizeCropToOutput(img, c, ...), and
// likewise for the center crop.
struct ResizePlan {
  DecodedRect box;
  CropRect window;
};
ResizePlan CropResizePlan(const DecodedImage& img, const CropRect& source_crop);
ResizePlan CenterCropResizePlan(const DecodedImage& img, const CenterCropPlan& plan);
void ApplyResizePlan(const DecodedImage& img, const ResizePlan& plan, bool flip,
                     const OutputSpec& spec, void* dst, ResizeScratch* scratch);

}  // namespace stoker
