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
  // EXIF orientation of a JPEG (1..8; 1 = as stored, also for PNG and when absent).
  // width/height are the stored size; with orientation 5..8 the displayed image is
  // height x width (DisplayedSize).
  int orientation = 1;
};

// The size an image is shown at after its EXIF orientation: width and height swapped
// for orientations 5..8 (transposed, rotated by 90 degrees).
inline void DisplayedSize(const ImageInfo& info, int* w, int* h) {
  const bool swap = info.orientation >= 5 && info.orientation <= 8;
  *w = swap ? info.height : info.width;
  *h = swap ? info.width : info.height;
}

// The EXIF orientation tag (0x0112) of a JPEG's APP1 "Exif" segment; 1 when the file has
// none or it is malformed (never an error: such files decode as stored).
int ReadJpegExifOrientation(const uint8_t* data, size_t n);

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
  // JPEG decoder knobs (defaults = libjpeg's and PIL's: JDCT_ISLOW, fancy upsampling;
  // see docs/ops.md for the measurements behind them).
  bool fast_dct = false;         // JDCT_IFAST
  bool fast_upsampling = false;  // do_fancy_upsampling = FALSE
  // By default only the scales with SIMD IDCTs (1/8, 2/8, 4/8, 8/8) are used: measured
  // on libjpeg-turbo 2.1.5, 5/8..7/8 decode slower than 8/8 and 3/8 slower than 4/8
  // (bench/RESULTS.md). true allows every M in 1..8.
  bool any_dct_scale = false;
  // Decode JPEGs in their EXIF orientation (what PIL's ImageOps.exif_transpose shows,
  // DALI's default, torchvision.io.decode_jpeg(apply_exif_orientation=True)). `crop` and
  // the target are then in displayed coordinates, and the DecodedImage describes the
  // displayed image (source_width/height displayed). Off by default: torchvision's PIL
  // loader (ImageFolder) ignores EXIF orientation. PNGs are decoded as stored.
  bool exif_orientation = false;
};

struct DecodedImage {
  int width = 0, height = 0;  // of `pixels`, RGB interleaved, stride = width * 3
  std::vector<uint8_t> pixels;  // capacity is reused between calls
  // The decoded pixels cover source region `crop` (the requested crop clipped to the
  // image; the whole image when none was requested) scaled by scale_num/8 (scale_num in
  // 1..8; 8 = full size), rounded outward to whole pixels of the scaled image:
  //
  //   s = scale_num / 8; the scaled image is ceil(W*s) x ceil(H*s) (libjpeg's rule), and
  //   scaled pixel k covers source [k/s, (k+1)/s).
  //   offset_x = floor(crop.x * s), width  = min(ceil((crop.x + crop.w) * s), ceil(W*s)) - offset_x
  //   offset_y = floor(crop.y * s), height = min(ceil((crop.y + crop.h) * s), ceil(H*s)) - offset_y
  //
  // so decoded pixel (i, j) is scaled-image pixel (offset_x + i, offset_y + j), and a
  // source coordinate u maps to decoded coordinate u * s - offset_x. At full scale
  // (scale_num == 8) the decoded pixels are exactly the crop. SourceToDecoded() does
  // the mapping. When region decode is off the decoded region is the whole image
  // (offset 0) and `crop` is still the requested crop.
  CropRect crop;
  int scale_num = 8;
  int offset_x = 0, offset_y = 0;
  int source_width = 0, source_height = 0;  // full-resolution size of the source image
};

// A rectangle in the pixel coordinates of a DecodedImage (fractional after DCT scaling).
struct DecodedRect {
  double x = 0, y = 0, w = 0, h = 0;
};
// Maps a rectangle in full-resolution source coordinates into `img`'s pixel coordinates.
DecodedRect SourceToDecoded(const DecodedImage& img, double x, double y, double w, double h);

// The DCT scale numerator (denominator 8) DecodeImage picks: the smallest M whose scaled
// crop still covers target_w x target_h (crop_w * M >= 8 * target_w, same for h), among
// {1, 2, 4, 8} (or 1..8 with any_scale); 8 when no target is given or the crop is
// smaller than the target.
int ChooseDctScale(int crop_w, int crop_h, int target_w, int target_h, bool any_scale = false);

// Thread-safe (no shared state). `out->pixels` keeps its capacity to avoid fresh pages.
Status DecodeImage(const uint8_t* data, size_t n, const DecodeRequest& req, DecodedImage* out);

// Encodes RGB to JPEG (TurboJPEG) at the given quality; used by `stoker gen`.
Status EncodeJpeg(const uint8_t* rgb, int width, int height, int quality,
                  std::vector<uint8_t>* out);
// Encodes RGB to PNG (libpng).
Status EncodePng(const uint8_t* rgb, int width, int height, std::vector<uint8_t>* out);

// Encoder options for tests and generators: `components` is the layout of `pixels`
// (1 gray, 3 RGB, 4 CMYK written as an Adobe JPEG with inverted CMYK, as Photoshop
// does); subsampling is the chroma subsampling of 3-component images.
enum class ChromaSubsampling { k444, k422, k420 };
struct JpegEncodeOptions {
  int quality = 90;
  int components = 3;
  bool progressive = false;
  bool arithmetic = false;  // arithmetic entropy coding (SOF9/SOF10) instead of Huffman
  ChromaSubsampling subsampling = ChromaSubsampling::k420;
};
Status EncodeJpegEx(const uint8_t* pixels, int width, int height, const JpegEncodeOptions& opts,
                    std::vector<uint8_t>* out);

// PNG encoder for tests: `channels` 1 (gray), 2 (gray+alpha), 3 (RGB), 4 (RGBA);
// bit_depth 8 or 16 (16-bit samples are big-endian pairs in `pixels`).
Status EncodePngEx(const uint8_t* pixels, int width, int height, int channels, int bit_depth,
                   std::vector<uint8_t>* out);

}  // namespace stoker
