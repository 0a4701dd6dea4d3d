// Image decode: JPEG through libjpeg-turbo (DCT-domain downscaling and crop-aware
// decode through the libjpeg API's jpeg_crop_scanline/jpeg_skip_scanlines), PNG through
// libpng. Output is always interleaved 8-bit RGB (grayscale and CMYK are converted).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace stoker {

enum class ImageFormat { kUnknown, kJpeg, kPng };

ImageFormat DetectImageFormat(const uint8_t* data, size_t n);

struct ImageInfo {
  int width = 0;
  int height = 0;
  int channels = 0;  // in the file
  ImageFormat format = ImageFormat::kUnknown;
};

// Reads only the header. kCorrupt if it is not a JPEG or PNG we can parse.
Result<ImageInfo> ReadImageInfo(const uint8_t* data, size_t n);

// A rectangle in full-resolution source pixel coordinates.
struct CropRect {
  int x = 0, y = 0, w = 0, h = 0;
};

struct DecodeRequest {
  // Region of the source to decode; w == 0 means the whole image.
  CropRect crop;
  // Size the crop will be resized to afterwards. When set (and allow_dct_scale), a JPEG is
  // decoded at the smallest libjpeg scale M/8 whose scaled crop still covers
  // target_w x target_h, so no detail the resize keeps is lost.
  int target_w = 0, target_h = 0;
  bool allow_dct_scale = true;
  bool allow_region_decode = true;  // decode only the rows/columns the crop needs
};

struct DecodedImage {
  int width = 0, height = 0;  // of `pixels`, RGB interleaved, stride = width * 3
  std::vector<uint8_t> pixels;  // capacity is reused between calls
  // The decoded pixels cover exactly source region `crop` scaled by scale_num/8
  // (scale_num in 1..8; 8 = full size). width = ceil(crop.w * scale_num / 8) etc.
  CropRect crop;
  int scale_num = 8;
};

// Thread-safe (no shared state). `out->pixels` keeps its capacity to avoid fresh pages.
Status DecodeImage(const uint8_t* data, size_t n, const DecodeRequest& req, DecodedImage* out);

// Encodes RGB to JPEG (TurboJPEG) at the given quality; used by `stoker gen`.
Status EncodeJpeg(const uint8_t* rgb, int width, int height, int quality,
                  std::vector<uint8_t>* out);
// Encodes RGB to PNG (libpng).
Status EncodePng(const uint8_t* rgb, int width, int height, std::vector<uint8_t>* out);

}  // namespace stoker
