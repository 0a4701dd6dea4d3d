// Internals shared by the codec implementation files; not part of the API.
#pragma once

#include <cstdint>

#include "codec/image.h"

namespace stoker::codec_internal {

// Images larger than this (in pixels) are rejected before any allocation.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

Status CheckImageSize(int width, int height);

// Clips `req` to a width x height image: w == 0 && h == 0 means the whole image; a crop
// that lies partly outside is clipped; an empty intersection is kInvalidArgument.
Status ClipCrop(const CropRect& req, int width, int height, CropRect* out);

Status DecodeJpeg(const uint8_t* data, size_t n, const DecodeRequest& req,
                  DecodedImage* out);
Result<ImageInfo> ReadJpegInfo(const uint8_t* data, size_t n);

// A JPEG with EXIF orientation `orientation` (2..8) decoded in displayed coordinates.
Status DecodeOriented(const uint8_t* data, size_t n, const DecodeRequest& req, int orientation,
                      DecodedImage* out);

Status DecodePng(const uint8_t* data, size_t n, const DecodeRequest& req, DecodedImage* out);
Result<ImageInfo> ReadPngInfo(const uint8_t* data, size_t n);

}  // namespace stoker::codec_internal
