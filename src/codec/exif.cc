// EXIF orientation: the JPEG APP1 "Exif" segment's TIFF IFD0 tag 0x0112, and the decode
// of an image in its displayed orientation (DecodeRequest::exif_orientation).
//
// The parser walks the JPEG marker segments before the first SOS with bounds checks on
// every length and offset; anything malformed means "no orientation" (1), never an error:
// PIL and libjpeg decode such files, and so must we.
#include <cstdint>
#include <algorithm>
#include <cstring>

#include "codec/image_internal.h"

namespace stoker {
namespace {

uint32_t Read16(const uint8_t* p, bool le) {
  return le ? (uint32_t{p[0]} | uint32_t{p[1]} << 8) : (uint32_t{p[0]} << 8 | p[1]);
}
uint32_t Read32(const uint8_t* p, bool le) {
  return le ? (Read16(p, true) | Read16(p + 2, true) << 16)
            : (Read16(p, false) << 16 | Read16(p + 2, false));
}

// Orientation from a TIFF block (the APP1 payload after "Exif\0\0"); 1 when absent.
int TiffOrientation(const uint8_t* t, size_t n) {
  if (n < 8) return 1;
  bool le;
  if (t[0] == 'I' && t[1] == 'I') {
    le = true;
  } else if (t[0] == 'M' && t[1] == 'M') {
    le = false;
  } else {
    return 1;
  }
  if (Read16(t + 2, le) != 42) return 1;
  const uint32_t ifd = Read32(t + 4, le);
  if (ifd > n - 2 || ifd < 8) return 1;
  const uint32_t count = Read16(t + ifd, le);
  const size_t entries = ifd + 2;
  for (uint32_t i = 0; i < count; ++i) {
    const size_t e = entries + size_t{i} * 12;
    if (e + 12 > n) return 1;
    if (Read16(t + e, le) != 0x0112) continue;
    // SHORT (3), count 1: the value sits in the first two bytes of the value field.
    if (Read16(t + e + 2, le) != 3 || Read32(t + e + 4, le) != 1) return 1;
    const uint32_t v = Read16(t + e + 8, le);
    return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
  }
  return 1;
}

// Raw <-> displayed geometry of an orientation: displayed = flip(swap(raw)).
struct Orient {
  bool swap = false, flip_x = false, flip_y = false;
};
Orient OrientOf(int o) {
  switch (o) {
    case 2: return {false, true, false};  // mirror horizontal
    case 3: return {false, true, true};   // rotate 180
    case 4: return {false, false, true};  // mirror vertical
    case 5: return {true, false, false};  // transpose
    case 6: return {true, true, false};   // rotate 90 clockwise
    case 7: return {true, true, true};    // transverse
    case 8: return {true, false, true};   // rotate 90 counter-clockwise
    default: return {};
  }
}

struct OrientScratch {
  DecodedImage raw;
};
OrientScratch* ThreadOrientScratch() {
  thread_local OrientScratch s;
  return &s;
}

}  // namespace

int ReadJpegExifOrientation(const uint8_t* data, size_t n) {
  if (n < 4 || data[0] != 0xff || data[1] != 0xd8) return 1;
  size_t i = 2;
  while (i + 4 <= n) {
    if (data[i] != 0xff) return 1;
    const uint8_t m = data[i + 1];
    if (m == 0xff) {  // fill byte
      ++i;
      continue;
    }
    if (m == 0xda || m == 0xd9) return 1;  // SOS / EOI: no more headers
    if (m == 0x01 || (m >= 0xd0 && m <= 0xd7)) {  // markers without a length
      i += 2;
      continue;
    }
    const size_t len = Read16(data + i + 2, false);
    if (len < 2 || len > n - i - 2) return 1;
    if (m == 0xe1 && len >= 8 && std::memcmp(data + i + 4, "Exif\0\0", 6) == 0) {
      return TiffOrientation(data + i + 10, len - 8);
    }
    i += 2 + len;
  }
  return 1;
}

namespace codec_internal {

Status DecodeOriented(const uint8_t* data, size_t n, const DecodeRequest& req, int orientation,
                      DecodedImage* out) {
  STOKER_ASSIGN_OR_RETURN(ImageInfo info, ReadJpegInfo(data, n));
  const Orient t = OrientOf(orientation);
  const int W = info.width, H = info.height;
  const int Wo = t.swap ? H : W, Ho = t.swap ? W : H;  // displayed size
  STOKER_RETURN_IF_ERROR(CheckImageSize(W, H));
  CropRect crop;
  STOKER_RETURN_IF_ERROR(ClipCrop(req.crop, Wo, Ho, &crop));
  // The displayed crop in raw coordinates: undo the flips, then the swap.
  const int ax0 = t.flip_x ? Wo - (crop.x + crop.w) : crop.x;
  const int ay0 = t.flip_y ? Ho - (crop.y + crop.h) : crop.y;
  DecodeRequest raw_req = req;
  raw_req.exif_orientation = false;
  raw_req.crop = t.swap ? CropRect{ay0, ax0, crop.h, crop.w} : CropRect{ax0, ay0, crop.w, crop.h};
  if (t.swap) std::swap(raw_req.target_w, raw_req.target_h);
  // A flip maps scaled raw pixel k to ceil(W*s) - 1 - k, which is the source mapping
  // u*s only when W*s is whole: keep DCT scales where it is, else decode at full size.
  if (req.allow_dct_scale && req.target_w > 0 && req.target_h > 0) {
    const int m = ChooseDctScale(raw_req.crop.w, raw_req.crop.h, raw_req.target_w,
                                 raw_req.target_h, req.any_dct_scale);
    if ((int64_t{W} * m) % 8 != 0 || (int64_t{H} * m) % 8 != 0) raw_req.allow_dct_scale = false;
  }
  DecodedImage& raw = ThreadOrientScratch()->raw;
  STOKER_RETURN_IF_ERROR(DecodeJpeg(data, n, raw_req, &raw));

  const int s = raw.scale_num;
  const int SW = static_cast<int>((int64_t{W} * s + 7) / 8);
  const int SH = static_cast<int>((int64_t{H} * s + 7) / 8);
  const int A = t.swap ? SH : SW, B = t.swap ? SW : SH;  // displayed scaled size
  // The decoded raw region [rx0, rx0 + rw) x [ry0, ry0 + rh) in displayed coordinates.
  const int ra0 = t.swap ? raw.offset_y : raw.offset_x, ra_n = t.swap ? raw.height : raw.width;
  const int rb0 = t.swap ? raw.offset_x : raw.offset_y, rb_n = t.swap ? raw.width : raw.height;
  const int ox = t.flip_x ? A - (ra0 + ra_n) : ra0;
  const int oy = t.flip_y ? B - (rb0 + rb_n) : rb0;
  out->width = ra_n;
  out->height = rb_n;
  out->crop = crop;
  out->scale_num = s;
  out->offset_x = ox;
  out->offset_y = oy;
  out->source_width = Wo;
  out->source_height = Ho;
  out->pixels.resize(static_cast<size_t>(ra_n) * rb_n * 3);
  const size_t raw_stride = static_cast<size_t>(raw.width) * 3;
  for (int y = 0; y < rb_n; ++y) {
    uint8_t* d = out->pixels.data() + static_cast<size_t>(y) * ra_n * 3;
    const int b = t.flip_y ? rb_n - 1 - y : y;  // local displayed row before the flip
    for (int x = 0; x < ra_n; ++x) {
      const int a = t.flip_x ? ra_n - 1 - x : x;
      const int rx = t.swap ? b : a, ry = t.swap ? a : b;
      std::memcpy(d + x * 3, raw.pixels.data() + ry * raw_stride + rx * 3, 3);
    }
  }
  return Status::OK();
}

}  // namespace codec_internal
}  // namespace stoker
