#include <cstdint>
#include "gpu/jpeg_probe.h"

namespace stoker::gpu {

const char* JpegCodingName(JpegCoding c) {
  switch (c) {
    case JpegCoding::kBaseline: return "baseline";
    case JpegCoding::kExtended: return "extended";
    case JpegCoding::kProgressive: return "progressive";
    case JpegCoding::kLossless: return "lossless";
    case JpegCoding::kHierarchical: return "hierarchical";
    case JpegCoding::kArithmetic: return "arithmetic";
  }
  return "?";
}

namespace {
int U16(const uint8_t* p) { return (p[0] << 8) | p[1]; }
}  // namespace

Result<JpegTraits> ProbeJpeg(const uint8_t* d, size_t n) {
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return Corrupt("not a JPEG (no SOI marker at offset 0)");
  JpegTraits t;
  bool have_frame = false;
  size_t pos = 2;
  while (true) {
    // Markers may be preceded by any number of 0xFF fill bytes.
    if (pos >= n) return Corrupt("JPEG header ends at offset {} before the scan (SOS)", pos);
    if (d[pos] != 0xFF) return Corrupt("JPEG: expected a marker at offset {}, found 0x{:02x}", pos, d[pos]);
    while (pos < n && d[pos] == 0xFF) ++pos;
    if (pos >= n) return Corrupt("JPEG header ends at offset {} inside a marker", pos);
    const uint8_t m = d[pos++];
    const size_t marker_at = pos - 2;
    if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // no length
    if (m == 0xD9) return Corrupt("JPEG: end of image (EOI) at offset {} before any scan", marker_at);
    if (pos + 2 > n) return Corrupt("JPEG: segment length at offset {} is truncated", pos);
    const size_t len = static_cast<size_t>(U16(d + pos));
    if (len < 2) return Corrupt("JPEG: segment 0xff{:02x} at offset {} has length {}", m, marker_at, len);
    if (pos + len > n)
      return Corrupt("JPEG: segment 0xff{:02x} at offset {} (length {}) runs past the end ({} bytes)",
                     m, marker_at, len, n);
    const uint8_t* seg = d + pos + 2;
    const size_t seg_len = len - 2;
    const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (sof) {
      if (have_frame) return Corrupt("JPEG: a second frame header (SOF) at offset {}", marker_at);
      if (seg_len < 6) return Corrupt("JPEG: frame header at offset {} is too short", marker_at);
      have_frame = true;
      t.precision = seg[0];
      t.height = U16(seg + 1);
      t.width = U16(seg + 3);
      t.components = seg[5];
      if (t.components < 1 || t.components > 4 || seg_len < 6 + 3u * t.components)
        return Corrupt("JPEG: frame header at offset {} declares {} components", marker_at,
                       t.components);
      for (int c = 0; c < t.components; ++c) t.sampling[c] = seg[6 + 3 * c + 1];
      const int k = m & 0x0F;
      if (k >= 9 && k <= 11) {
        t.arithmetic = true;
        t.coding = JpegCoding::kArithmetic;
      } else if (k == 0) {
        t.coding = JpegCoding::kBaseline;
      } else if (k == 1) {
        t.coding = JpegCoding::kExtended;
      } else if (k == 2) {
        t.coding = JpegCoding::kProgressive;
      } else if (k == 3) {
        t.coding = JpegCoding::kLossless;
      } else {
        t.coding = JpegCoding::kHierarchical;
      }
      if (t.width == 0 || t.height == 0)
        return Corrupt("JPEG: frame header at offset {} gives size {}x{}", marker_at, t.width, t.height);
    } else if (m == 0xCC) {
      t.arithmetic = true;  // arithmetic conditioning tables
    } else if (m == 0xEE && seg_len >= 12 && seg[0] == 'A' && seg[1] == 'd' && seg[2] == 'o' &&
               seg[3] == 'b' && seg[4] == 'e') {
      t.adobe = true;
      t.adobe_transform = seg[11];
    } else if (m == 0xDA) {
      if (!have_frame) return Corrupt("JPEG: scan (SOS) at offset {} before any frame header", marker_at);
      if (t.arithmetic) t.coding = JpegCoding::kArithmetic;
      return t;
    }
    pos += len;
  }
}

}  // namespace stoker::gpu
