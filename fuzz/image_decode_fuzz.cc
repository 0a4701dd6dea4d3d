// libFuzzer target for the image codecs: header parse (with the EXIF orientation
// parser), then a few decode requests (full, DCT-scaled, region decode with a crop
// derived from the input, and the same in EXIF orientation) on JPEG and PNG data.
#include <cstddef>
#include <cstdint>

#include "codec/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker;
  auto info = ReadImageInfo(data, size);
  DecodedImage img;
  if (!info.ok()) {
    // Decode must reject what the header reader rejects, without crashing.
    DecodeImage(data, size, DecodeRequest{}, &img).IgnoreError();
    return 0;
  }
  // Keep fuzzing fast: skip huge claimed sizes (the decoder's own limit is 2^28 pixels).
  if (static_cast<int64_t>(info->width) * info->height > (int64_t{1} << 22)) return 0;
  const int w = info->width, h = info->height;
  const uint8_t k = size > 0 ? data[size - 1] : 0;
  DecodeRequest full;
  DecodeImage(data, size, full, &img).IgnoreError();

  DecodeRequest scaled;
  scaled.target_w = 1 + w / (1 + (k & 7));
  scaled.target_h = 1 + h / (1 + (k & 7));
  scaled.fast_dct = k & 8;
  scaled.fast_upsampling = k & 16;
  DecodeImage(data, size, scaled, &img).IgnoreError();

  DecodeRequest region;
  region.crop.x = (k * 7) % (w > 0 ? w : 1);
  region.crop.y = (k * 13) % (h > 0 ? h : 1);
  region.crop.w = 1 + (k * 31) % (w > 0 ? w : 1);
  region.crop.h = 1 + (k * 17) % (h > 0 ? h : 1);
  region.target_w = 1 + region.crop.w / 3;
  region.target_h = 1 + region.crop.h / 3;
  auto check = [&](const DecodedImage& d) {
    // The documented geometry must hold for every successful decode.
    if (d.width <= 0 || d.height <= 0 ||
        d.pixels.size() != static_cast<size_t>(d.width) * d.height * 3 ||
        d.scale_num < 1 || d.scale_num > 8) {
      __builtin_trap();
    }
  };
  if (DecodeImage(data, size, region, &img).ok()) check(img);
  if (info->orientation < 1 || info->orientation > 8 ||
      ReadJpegExifOrientation(data, size) != info->orientation) {
    __builtin_trap();
  }
  // The same in displayed coordinates (the crop is clipped to the displayed size).
  region.exif_orientation = true;
  if (DecodeImage(data, size, region, &img).ok()) check(img);
  return 0;
}
