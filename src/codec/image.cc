#include "codec/image.h"

#include <cstdint>
#include <algorithm>
#include <cstring>

#include "codec/image_internal.h"

namespace stoker {

namespace codec_internal {

Status CheckImageSize(int width, int height) {
  if (width <= 0 || height <= 0) return Corrupt("image has bad size {}x{}", width, height);
  if (int64_t{width} * height > kMaxImagePixels) {
    return Corrupt("image too large: {}x{} is over the {} pixel limit", width, height,
                   kMaxImagePixels);
  }
  return Status::OK();
}

Status ClipCrop(const CropRect& req, int width, int height, CropRect* out) {
  if (req.w == 0 && req.h == 0) {
    *out = CropRect{0, 0, width, height};
    return Status::OK();
  }
  const int64_t x0 = std::max<int64_t>(req.x, 0), y0 = std::max<int64_t>(req.y, 0);
  const int64_t x1 = std::min<int64_t>(int64_t{req.x} + req.w, width);
  const int64_t y1 = std::min<int64_t>(int64_t{req.y} + req.h, height);
  if (req.w <= 0 || req.h <= 0 || x1 <= x0 || y1 <= y0) {
    return InvalidArgument("crop {}x{}+{}+{} does not intersect the {}x{} image", req.w, req.h,
                           req.x, req.y, width, height);
  }
  *out = CropRect{static_cast<int>(x0), static_cast<int>(y0), static_cast<int>(x1 - x0),
                  static_cast<int>(y1 - y0)};
  return Status::OK();
}

}  // namespace codec_internal

ImageFormat DetectImageFormat(const uint8_t* data, size_t n) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  if (n >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return ImageFormat::kJpeg;
  if (n >= 8 && std::memcmp(data, kPng, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

Result<ImageInfo> ReadImageInfo(const uint8_t* data, size_t n) {
  switch (DetectImageFormat(data, n)) {
    case ImageFormat::kJpeg: {
      auto info = codec_internal::ReadJpegInfo(data, n);
      if (info.ok()) info->orientation = ReadJpegExifOrientation(data, n);
      return info;
    }
    case ImageFormat::kPng:
      return codec_internal::ReadPngInfo(data, n);
    default:
      break;
  }
  if (n == 0) return Corrupt("empty image data");
  return Corrupt("not a JPEG or PNG image ({} bytes, starts {:02x} {:02x})", n, data[0],
                 n > 1 ? data[1] : 0);
}

int ChooseDctScale(int crop_w, int crop_h, int target_w, int target_h, bool any_scale) {
  if (target_w <= 0 || target_h <= 0) return 8;
  for (int m = 1; m < 8; m = any_scale ? m + 1 : m * 2) {
    if (int64_t{crop_w} * m >= int64_t{target_w} * 8 &&
        int64_t{crop_h} * m >= int64_t{target_h} * 8) {
      return m;
    }
  }
  return 8;
}

DecodedRect SourceToDecoded(const DecodedImage& img, double x, double y, double w, double h) {
  const double s = img.scale_num / 8.0;
  return DecodedRect{x * s - img.offset_x, y * s - img.offset_y, w * s, h * s};
}

Status DecodeImage(const uint8_t* data, size_t n, const DecodeRequest& req, DecodedImage* out) {
  switch (DetectImageFormat(data, n)) {
    case ImageFormat::kJpeg:
      if (req.exif_orientation) {
        const int o = ReadJpegExifOrientation(data, n);
        if (o != 1) return codec_internal::DecodeOriented(data, n, req, o, out);
      }
      return codec_internal::DecodeJpeg(data, n, req, out);
    case ImageFormat::kPng:
      return codec_internal::DecodePng(data, n, req, out);
    default:
      break;
  }
  if (n == 0) return Corrupt("empty image data");
  return Corrupt("not a JPEG or PNG image ({} bytes, starts {:02x} {:02x})", n, data[0],
                 n > 1 ? data[1] : 0);
}

}  // namespace stoker
