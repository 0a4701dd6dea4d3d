#include "codec/image.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <png.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "codec/test_images.h"

namespace stoker {
namespace {

using testing::MaxAbsDiff;
using testing::MeanAbsDiff;
using testing::SyntheticRgb;

std::vector<uint8_t> Jpeg(const std::vector<uint8_t>& px, int w, int h, JpegEncodeOptions o = {}) {
  std::vector<uint8_t> out;
  Status st = EncodeJpegEx(px.data(), w, h, o, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

DecodedImage MustDecode(const std::vector<uint8_t>& data, const DecodeRequest& req = {}) {
  DecodedImage img;
  Status st = DecodeImage(data.data(), data.size(), req, &img);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return img;
}

// Writes a PNG with libpng directly, for the layouts EncodePngEx does not make
// (palette, Adam7 interlace).
std::vector<uint8_t> PaletteOrInterlacedPng(int w, int h, bool palette, bool interlace,
                                            std::vector<uint8_t>* expect_rgb) {
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    ADD_FAILURE() << "libpng write failed";
    png_destroy_write_struct(&png, &info);
    return {};
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep d, size_t n) {
        auto* v = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(p));
        v->insert(v->end(), d, d + n);
      },
      nullptr);
  png_set_IHDR(png, info, w, h, 8, palette ? PNG_COLOR_TYPE_PALETTE : PNG_COLOR_TYPE_RGB,
               interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_color pal[16];
  for (int i = 0; i < 16; ++i) {
    pal[i].red = static_cast<png_byte>(i * 16);
    pal[i].green = static_cast<png_byte>(255 - i * 16);
    pal[i].blue = static_cast<png_byte>((i * 77) & 255);
  }
  if (palette) {
    png_set_PLTE(png, info, pal, 16);
    png_byte alpha[16];
    for (int i = 0; i < 16; ++i) alpha[i] = static_cast<png_byte>(i * 16);
    png_set_tRNS(png, info, alpha, 16, nullptr);  // ignored by the decoder, like PIL's RGB
  }
  png_write_info(png, info);
  std::vector<uint8_t> rows(static_cast<size_t>(w) * h * 3);
  expect_rgb->assign(static_cast<size_t>(w) * h * 3, 0);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int idx = (x * 3 + y * 5) % 16;
      uint8_t* e = &(*expect_rgb)[(static_cast<size_t>(y) * w + x) * 3];
      if (palette) {
        rows[static_cast<size_t>(y) * w + x] = static_cast<uint8_t>(idx);
        e[0] = pal[idx].red;
        e[1] = pal[idx].green;
        e[2] = pal[idx].blue;
      } else {
        for (int c = 0; c < 3; ++c) e[c] = static_cast<uint8_t>((x * 7 + y * 13 + c * 50) & 255);
        std::memcpy(&rows[(static_cast<size_t>(y) * w + x) * 3], e, 3);
      }
    }
  }
  std::vector<png_bytep> ptrs(h);
  for (int y = 0; y < h; ++y) ptrs[y] = rows.data() + static_cast<size_t>(y) * w * (palette ? 1 : 3);
  png_write_image(png, ptrs.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

TEST(ImageCodec, DetectsFormats) {
  auto px = SyntheticRgb(8, 8, 1);
  auto jpg = Jpeg(px, 8, 8);
  std::vector<uint8_t> png;
  ASSERT_TRUE(EncodePng(px.data(), 8, 8, &png).ok());
  EXPECT_EQ(DetectImageFormat(jpg.data(), jpg.size()), ImageFormat::kJpeg);
  EXPECT_EQ(DetectImageFormat(png.data(), png.size()), ImageFormat::kPng);
  const uint8_t text[] = "GIF89a....";
  EXPECT_EQ(DetectImageFormat(text, sizeof(text)), ImageFormat::kUnknown);
  EXPECT_EQ(DetectImageFormat(jpg.data(), 2), ImageFormat::kUnknown);
  EXPECT_EQ(DetectImageFormat(nullptr, 0), ImageFormat::kUnknown);
}

TEST(ImageCodec, ReadsHeaderInfo) {
  auto px = SyntheticRgb(37, 23, 2);
  auto jpg = Jpeg(px, 37, 23);
  auto info = ReadImageInfo(jpg.data(), jpg.size());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->width, 37);
  EXPECT_EQ(info->height, 23);
  EXPECT_EQ(info->channels, 3);
  EXPECT_EQ(info->format, ImageFormat::kJpeg);

  std::vector<uint8_t> gray(37 * 23, 100);
  JpegEncodeOptions go;
  go.components = 1;
  auto gj = Jpeg(gray, 37, 23, go);
  ASSERT_TRUE(ReadImageInfo(gj.data(), gj.size()).ok());
  EXPECT_EQ(ReadImageInfo(gj.data(), gj.size())->channels, 1);

  std::vector<uint8_t> ga(5 * 9 * 2, 7), png;
  ASSERT_TRUE(EncodePngEx(ga.data(), 5, 9, 2, 8, &png).ok());
  auto pinfo = ReadImageInfo(png.data(), png.size());
  ASSERT_TRUE(pinfo.ok()) << pinfo.status().ToString();
  EXPECT_EQ(pinfo->width, 5);
  EXPECT_EQ(pinfo->height, 9);
  EXPECT_EQ(pinfo->channels, 2);
  EXPECT_EQ(pinfo->format, ImageFormat::kPng);
}

TEST(ImageCodec, JpegRoundTripOddSizes) {
  for (auto [w, h] : {std::pair{1, 1}, {37, 23}, {17, 64}, {129, 67}}) {
    auto px = SyntheticRgb(w, h, 3, /*noise=*/2);
    JpegEncodeOptions o;
    o.quality = 95;
    o.subsampling = ChromaSubsampling::k444;  // sharp synthetic edges: no chroma loss
    auto jpg = Jpeg(px, w, h, o);
    DecodedImage img = MustDecode(jpg);
    ASSERT_EQ(img.width, w);
    ASSERT_EQ(img.height, h);
    EXPECT_EQ(img.scale_num, 8);
    EXPECT_EQ(img.source_width, w);
    EXPECT_EQ(img.offset_x, 0);
    ASSERT_EQ(img.pixels.size(), px.size());
    EXPECT_LT(MeanAbsDiff(img.pixels.data(), px.data(), px.size()), 6.0) << w << "x" << h;
  }
}

TEST(ImageCodec, GrayscaleJpegBecomesRgb) {
  const int w = 33, h = 21;
  std::vector<uint8_t> gray(w * h);
  for (int i = 0; i < w * h; ++i) gray[i] = static_cast<uint8_t>((i * 3) % 200 + 20);
  JpegEncodeOptions o;
  o.components = 1;
  o.quality = 98;
  auto jpg = Jpeg(gray, w, h, o);
  DecodedImage img = MustDecode(jpg);
  ASSERT_EQ(img.width, w);
  ASSERT_EQ(img.pixels.size(), static_cast<size_t>(w) * h * 3);
  double diff = 0;
  for (int i = 0; i < w * h; ++i) {
    EXPECT_EQ(img.pixels[i * 3], img.pixels[i * 3 + 1]);
    EXPECT_EQ(img.pixels[i * 3], img.pixels[i * 3 + 2]);
    diff += std::abs(img.pixels[i * 3] - gray[i]);
  }
  EXPECT_LT(diff / (w * h), 4.0);
}

TEST(ImageCodec, CmykJpegConvertsLikePil) {
  // Adobe (inverted) CMYK: with K' = 255 (no black) the stored C'M'Y' are R, G, B; with
  // K' = 128 every channel is scaled by 128/255.
  const int w = 24, h = 16;
  auto rgb = SyntheticRgb(w, h, 4, 0);
  for (int k : {255, 128}) {
    std::vector<uint8_t> cmyk(static_cast<size_t>(w) * h * 4);
    for (int i = 0; i < w * h; ++i) {
      for (int c = 0; c < 3; ++c) cmyk[i * 4 + c] = rgb[i * 3 + c];
      cmyk[i * 4 + 3] = static_cast<uint8_t>(k);
    }
    JpegEncodeOptions o;
    o.components = 4;
    o.quality = 100;
    auto jpg = Jpeg(cmyk, w, h, o);
    auto info = ReadImageInfo(jpg.data(), jpg.size());
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->channels, 4);
    DecodedImage img = MustDecode(jpg);
    ASSERT_EQ(img.pixels.size(), rgb.size());
    std::vector<uint8_t> expect(rgb.size());
    for (size_t i = 0; i < rgb.size(); ++i) expect[i] = static_cast<uint8_t>(rgb[i] * k / 255);
    EXPECT_LT(MeanAbsDiff(img.pixels.data(), expect.data(), expect.size()), 3.0) << "K'=" << k;
    // Region decode of a CMYK image goes through the same conversion.
    DecodeRequest req;
    req.crop = CropRect{5, 3, 11, 9};
    DecodedImage part = MustDecode(jpg, req);
    ASSERT_EQ(part.width, 11);
    for (int y = 0; y < 9; ++y) {
      EXPECT_EQ(0, std::memcmp(&part.pixels[y * 11 * 3], &img.pixels[((y + 3) * w + 5) * 3], 33));
    }
  }
}

// The same bytes without the APP14 "Adobe" segment.
std::vector<uint8_t> WithoutAdobeMarker(const std::vector<uint8_t>& jpg) {
  std::vector<uint8_t> out(jpg.begin(), jpg.begin() + 2);
  size_t i = 2;
  while (i + 4 <= jpg.size() && jpg[i] == 0xff && jpg[i + 1] != 0xda) {
    const size_t len = (size_t{jpg[i + 2]} << 8) | jpg[i + 3];
    const bool adobe = jpg[i + 1] == 0xee && i + 9 <= jpg.size() &&
                       std::memcmp(&jpg[i + 4], "Adobe", 5) == 0;
    if (!adobe) out.insert(out.end(), jpg.begin() + i, jpg.begin() + i + 2 + len);
    i += 2 + len;
  }
  out.insert(out.end(), jpg.begin() + i, jpg.end());
  return out;
}

TEST(ImageCodec, CmykJpegWithoutAdobeMarkerIsStillInvertedLikePil) {
  // PIL reads every CMYK JPEG as Adobe's inverted CMYK ("CMYK;I"), marker or not.
  const int w = 16, h = 16;
  auto rgb = SyntheticRgb(w, h, 4, 0);
  std::vector<uint8_t> cmyk(static_cast<size_t>(w) * h * 4);
  for (int i = 0; i < w * h; ++i) {
    for (int c = 0; c < 3; ++c) cmyk[i * 4 + c] = rgb[i * 3 + c];
    cmyk[i * 4 + 3] = 200;
  }
  JpegEncodeOptions o;
  o.components = 4;
  o.quality = 100;
  auto jpg = Jpeg(cmyk, w, h, o);
  auto plain = WithoutAdobeMarker(jpg);
  ASSERT_LT(plain.size(), jpg.size());  // the marker was there and is gone
  EXPECT_EQ(MustDecode(plain).pixels, MustDecode(jpg).pixels);
}

TEST(ImageCodec, ProgressiveDecodesLikeBaseline) {
  // Same quantisation, so the coefficients and the decoded pixels are identical.
  const int w = 75, h = 51;
  auto px = SyntheticRgb(w, h, 5);
  JpegEncodeOptions o;
  auto base = Jpeg(px, w, h, o);
  o.progressive = true;
  auto prog = Jpeg(px, w, h, o);
  ASSERT_NE(base, prog);
  DecodedImage a = MustDecode(base), b = MustDecode(prog);
  ASSERT_EQ(a.pixels.size(), b.pixels.size());
  EXPECT_EQ(a.pixels, b.pixels);
  DecodeRequest req;
  req.crop = CropRect{19, 13, 30, 20};
  req.target_w = 15;
  req.target_h = 10;
  DecodedImage ra = MustDecode(base, req), rb = MustDecode(prog, req);
  EXPECT_EQ(ra.scale_num, 4);
  EXPECT_EQ(ra.pixels, rb.pixels);
}

TEST(ImageCodec, ChoosesSmallestCoveringDctScale) {
  // Default: the SIMD scales 1/8, 2/8, 4/8, 8/8.
  EXPECT_EQ(ChooseDctScale(448, 448, 224, 224), 4);
  EXPECT_EQ(ChooseDctScale(447, 448, 224, 224), 8);  // 447 * 4 / 8 < 224
  EXPECT_EQ(ChooseDctScale(896, 900, 224, 224), 2);
  EXPECT_EQ(ChooseDctScale(1792, 1792, 224, 224), 1);
  EXPECT_EQ(ChooseDctScale(5000, 5000, 224, 224), 1);
  EXPECT_EQ(ChooseDctScale(300, 300, 224, 224), 8);
  EXPECT_EQ(ChooseDctScale(224, 224, 224, 224), 8);
  EXPECT_EQ(ChooseDctScale(100, 100, 224, 224), 8);   // upscaling: full size
  EXPECT_EQ(ChooseDctScale(1000, 500, 224, 224), 4);  // the tighter side decides
  EXPECT_EQ(ChooseDctScale(1000, 1000, 0, 0), 8);
  // Every M in 1..8.
  EXPECT_EQ(ChooseDctScale(447, 448, 224, 224, true), 5);
  EXPECT_EQ(ChooseDctScale(300, 300, 224, 224, true), 6);  // 300 * 6 / 8 = 225
  EXPECT_EQ(ChooseDctScale(1000, 300, 224, 224, true), 6);
  EXPECT_EQ(ChooseDctScale(700, 700, 224, 224, true), 3);
}

TEST(ImageCodec, DctScaledDecodeFollowsLibjpegSizes) {
  const int w = 203, h = 117;
  auto px = SyntheticRgb(w, h, 6, 0);
  auto jpg = Jpeg(px, w, h);
  DecodedImage full = MustDecode(jpg);
  for (int m = 1; m <= 8; ++m) {
    DecodeRequest req;
    // Full image with a target that makes ChooseDctScale pick exactly m.
    req.target_w = (w * m) / 8;
    req.target_h = 1;
    req.any_dct_scale = true;
    ASSERT_EQ(ChooseDctScale(w, h, req.target_w, req.target_h, true), m);
    DecodedImage img = MustDecode(jpg, req);
    EXPECT_EQ(img.scale_num, m);
    EXPECT_EQ(img.width, (w * m + 7) / 8);
    EXPECT_EQ(img.height, (h * m + 7) / 8);
    // A scaled pixel is close to the mean of the source block it covers (smooth content).
    double err = 0;
    int count = 0;
    for (int y = 0; y + 1 < img.height; y += 3) {
      for (int x = 0; x + 1 < img.width; x += 3) {
        const double s = 8.0 / m;
        const int sx0 = static_cast<int>(x * s), sx1 = static_cast<int>((x + 1) * s);
        const int sy0 = static_cast<int>(y * s), sy1 = static_cast<int>((y + 1) * s);
        double mean = 0;
        int k = 0;
        for (int yy = sy0; yy < std::min(sy1, h); ++yy) {
          for (int xx = sx0; xx < std::min(sx1, w); ++xx) {
            mean += full.pixels[(static_cast<size_t>(yy) * w + xx) * 3 + 1];
            ++k;
          }
        }
        if (k == 0) continue;
        err += std::abs(mean / k - img.pixels[(static_cast<size_t>(y) * img.width + x) * 3 + 1]);
        ++count;
      }
    }
    EXPECT_LT(err / count, 12.0) << "scale " << m << "/8";
  }
}

// Region decode (rows skipped, columns cropped at an iMCU boundary and trimmed) equals
// the same region of a full decode exactly: the decoder's column window is widened past
// the crop on both sides, because fancy upsampling treats the window's edges as image
// edges (without the margin the crop's first/last columns differed by up to 4 levels).
TEST(ImageCodec, RegionDecodeMatchesFullDecode) {
  const int w = 301, h = 203;
  auto px = SyntheticRgb(w, h, 7);
  for (auto sub : {ChromaSubsampling::k420, ChromaSubsampling::k422, ChromaSubsampling::k444}) {
    for (bool progressive : {false, true}) {
      JpegEncodeOptions o;
      o.subsampling = sub;
      o.progressive = progressive;
      auto jpg = Jpeg(px, w, h, o);
      Rng rng(11);
      for (int t = 0; t < 25; ++t) {
        CropRect c;
        c.w = static_cast<int>(rng.Int(1, w));
        c.h = static_cast<int>(rng.Int(1, h));
        c.x = static_cast<int>(rng.Int(0, w - c.w));
        c.y = static_cast<int>(rng.Int(0, h - c.h));
        DecodeRequest req;
        req.crop = c;
        if (t % 2) {
          req.target_w = std::max(1, c.w / 3);
          req.target_h = std::max(1, c.h / 3);
          req.any_dct_scale = t % 4 == 1;  // 3/8 (C IDCT) or 2/8 (SIMD)
        }
        DecodedImage region = MustDecode(jpg, req);
        DecodeRequest whole = req;
        whole.allow_region_decode = false;
        DecodedImage full = MustDecode(jpg, whole);
        ASSERT_EQ(region.scale_num, full.scale_num);
        EXPECT_EQ(full.offset_x, 0);
        EXPECT_EQ(full.width, (w * full.scale_num + 7) / 8);
        const int m = region.scale_num;
        // Documented rounding of the decoded region.
        EXPECT_EQ(region.offset_x, c.x * m / 8);
        EXPECT_EQ(region.offset_y, c.y * m / 8);
        EXPECT_EQ(region.width,
                  std::min((c.x + c.w) * m + 7, w * m + 7) / 8 - region.offset_x);
        EXPECT_EQ(region.height,
                  std::min((c.y + c.h) * m + 7, h * m + 7) / 8 - region.offset_y);
        EXPECT_EQ(region.crop.x, c.x);
        EXPECT_EQ(region.crop.w, c.w);
        int max_diff = 0;
        double sum = 0;
        for (int y = 0; y < region.height; ++y) {
          const uint8_t* a = &region.pixels[static_cast<size_t>(y) * region.width * 3];
          const uint8_t* b = &full.pixels[(static_cast<size_t>(y + region.offset_y) * full.width +
                                           region.offset_x) * 3];
          max_diff = std::max(max_diff, MaxAbsDiff(a, b, region.width * 3));
          sum += MeanAbsDiff(a, b, region.width * 3);
        }
        EXPECT_EQ(max_diff, 0) << "crop " << c.w << "x" << c.h << "+" << c.x << "+" << c.y
                               << " scale " << m << " mean diff " << sum / region.height;
      }
    }
  }
}

TEST(ImageCodec, PngLayoutsDecodeToRgb) {
  const int w = 13, h = 7;
  auto rgb = SyntheticRgb(w, h, 8);
  std::vector<uint8_t> png;
  ASSERT_TRUE(EncodePng(rgb.data(), w, h, &png).ok());
  EXPECT_EQ(MustDecode(png).pixels, rgb);

  // RGBA: alpha dropped, not composited.
  std::vector<uint8_t> rgba(static_cast<size_t>(w) * h * 4);
  for (int i = 0; i < w * h; ++i) {
    std::memcpy(&rgba[i * 4], &rgb[i * 3], 3);
    rgba[i * 4 + 3] = static_cast<uint8_t>(i);
  }
  ASSERT_TRUE(EncodePngEx(rgba.data(), w, h, 4, 8, &png).ok());
  EXPECT_EQ(MustDecode(png).pixels, rgb);

  // Gray and gray + alpha: replicated.
  std::vector<uint8_t> gray(w * h), ga(w * h * 2), expect(w * h * 3);
  for (int i = 0; i < w * h; ++i) {
    gray[i] = static_cast<uint8_t>(i * 2);
    ga[i * 2] = gray[i];
    ga[i * 2 + 1] = 9;
    expect[i * 3] = expect[i * 3 + 1] = expect[i * 3 + 2] = gray[i];
  }
  ASSERT_TRUE(EncodePngEx(gray.data(), w, h, 1, 8, &png).ok());
  EXPECT_EQ(MustDecode(png).pixels, expect);
  ASSERT_TRUE(EncodePngEx(ga.data(), w, h, 2, 8, &png).ok());
  EXPECT_EQ(MustDecode(png).pixels, expect);

  // 16-bit RGB: the high byte.
  std::vector<uint8_t> rgb16(rgb.size() * 2);
  for (size_t i = 0; i < rgb.size(); ++i) {
    rgb16[2 * i] = rgb[i];
    rgb16[2 * i + 1] = static_cast<uint8_t>(255 - rgb[i]);
  }
  ASSERT_TRUE(EncodePngEx(rgb16.data(), w, h, 3, 16, &png).ok());
  EXPECT_EQ(MustDecode(png).pixels, rgb);

  // 16-bit gray: clipped to 0..255 like PIL's mode "I" -> RGB (not the high byte), for
  // the whole image and a region.
  std::vector<uint8_t> g16(static_cast<size_t>(w) * h * 2), clipped(static_cast<size_t>(w) * h * 3);
  for (int i = 0; i < w * h; ++i) {
    const int v = (i * 37) % 700;  // below and above 255
    g16[2 * i] = static_cast<uint8_t>(v >> 8);
    g16[2 * i + 1] = static_cast<uint8_t>(v & 0xff);
    clipped[3 * i] = clipped[3 * i + 1] = clipped[3 * i + 2] = static_cast<uint8_t>(std::min(v, 255));
  }
  ASSERT_TRUE(EncodePngEx(g16.data(), w, h, 1, 16, &png).ok());
  EXPECT_EQ(MustDecode(png).pixels, clipped);
  {
    DecodeRequest r16;
    r16.crop = CropRect{2, 1, 4, 3};
    DecodedImage part16 = MustDecode(png, r16);
    ASSERT_EQ(part16.width, 4);
    for (int y = 0; y < 3; ++y) {
      EXPECT_EQ(0, std::memcmp(&part16.pixels[y * 12], &clipped[((y + 1) * w + 2) * 3], 12));
    }
  }

  // Palette (with tRNS, ignored) and Adam7 interlace.
  std::vector<uint8_t> want;
  png = PaletteOrInterlacedPng(w, h, /*palette=*/true, /*interlace=*/false, &want);
  EXPECT_EQ(MustDecode(png).pixels, want);
  png = PaletteOrInterlacedPng(w, h, /*palette=*/false, /*interlace=*/true, &want);
  EXPECT_EQ(MustDecode(png).pixels, want);
  DecodeRequest req;
  req.crop = CropRect{3, 2, 5, 4};
  DecodedImage part = MustDecode(png, req);
  ASSERT_EQ(part.width, 5);
  ASSERT_EQ(part.height, 4);
  for (int y = 0; y < 4; ++y) {
    EXPECT_EQ(0, std::memcmp(&part.pixels[y * 15], &want[((y + 2) * w + 3) * 3], 15));
  }
}

TEST(ImageCodec, PngRegionDecodeIsExact) {
  const int w = 40, h = 30;
  auto rgb = SyntheticRgb(w, h, 9);
  std::vector<uint8_t> png;
  ASSERT_TRUE(EncodePng(rgb.data(), w, h, &png).ok());
  DecodeRequest req;
  req.crop = CropRect{7, 11, 20, 9};
  req.target_w = 5;  // PNG has no DCT scaling
  req.target_h = 5;
  DecodedImage img = MustDecode(png, req);
  EXPECT_EQ(img.scale_num, 8);
  EXPECT_EQ(img.offset_x, 7);
  EXPECT_EQ(img.offset_y, 11);
  ASSERT_EQ(img.width, 20);
  ASSERT_EQ(img.height, 9);
  for (int y = 0; y < 9; ++y) {
    EXPECT_EQ(0, std::memcmp(&img.pixels[y * 60], &rgb[((y + 11) * w + 7) * 3], 60));
  }
}

TEST(ImageCodec, CropIsClippedOrRejected) {
  auto px = SyntheticRgb(32, 32, 10);
  auto jpg = Jpeg(px, 32, 32);
  DecodeRequest req;
  req.crop = CropRect{20, 24, 50, 50};
  DecodedImage img = MustDecode(jpg, req);
  EXPECT_EQ(img.crop.x, 20);
  EXPECT_EQ(img.crop.w, 12);
  EXPECT_EQ(img.crop.h, 8);
  EXPECT_EQ(img.width, 12);
  EXPECT_EQ(img.height, 8);
  req.crop = CropRect{40, 0, 5, 5};
  Status st = DecodeImage(jpg.data(), jpg.size(), req, &img);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("does not intersect"), std::string::npos) << st.message();
}

TEST(ImageCodec, BadInputIsCorruptWithMessage) {
  const int w = 64, h = 48;
  auto px = SyntheticRgb(w, h, 11);
  auto jpg = Jpeg(px, w, h);
  JpegEncodeOptions po;
  po.progressive = true;
  auto prog = Jpeg(px, w, h, po);
  std::vector<uint8_t> png;
  ASSERT_TRUE(EncodePng(px.data(), w, h, &png).ok());
  DecodedImage img;

  auto expect_corrupt = [&](const std::vector<uint8_t>& data, const DecodeRequest& req,
                            const char* what) {
    Status st = DecodeImage(data.data(), data.size(), req, &img);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << what << ": " << st.ToString();
    EXPECT_FALSE(st.message().empty());
    return st;
  };
  Status st = expect_corrupt({}, {}, "empty");
  EXPECT_NE(st.message().find("empty"), std::string::npos);
  std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  st = expect_corrupt(text, {}, "text");
  EXPECT_NE(st.message().find("not a JPEG or PNG"), std::string::npos);
  EXPECT_FALSE(ReadImageInfo(text.data(), text.size()).ok());
  EXPECT_FALSE(ReadImageInfo(nullptr, 0).ok());

  // Truncated JPEGs: in the header, in the entropy-coded data, just before EOI.
  for (const auto* src : {&jpg, &prog}) {
    for (size_t keep : {size_t{3}, size_t{20}, src->size() / 3, src->size() / 2, src->size() - 2}) {
      std::vector<uint8_t> cut(src->begin(), src->begin() + keep);
      st = expect_corrupt(cut, {}, "truncated jpeg");
      EXPECT_NE(st.message().find("JPEG"), std::string::npos) << st.message();
    }
  }
  std::vector<uint8_t> cut(jpg.begin(), jpg.begin() + jpg.size() / 2);
  st = expect_corrupt(cut, {}, "truncated jpeg");
  EXPECT_NE(st.message().find("Premature end"), std::string::npos) << st.message();
  std::vector<uint8_t> head(jpg.begin(), jpg.begin() + 10);
  EXPECT_EQ(ReadImageInfo(head.data(), head.size()).status().code(), StatusCode::kCorrupt);

  // A JPEG that is not even a valid header after the SOI marker.
  std::vector<uint8_t> bad = {0xff, 0xd8, 0xff, 0x00, 0x01, 0x02, 0x03, 0x04};
  expect_corrupt(bad, {}, "bad header").IgnoreError();

  // Truncated and bit-flipped PNG.
  for (size_t keep : {size_t{8}, size_t{30}, png.size() / 2, png.size() - 20}) {
    std::vector<uint8_t> pcut(png.begin(), png.begin() + keep);
    st = expect_corrupt(pcut, {}, "truncated png");
    EXPECT_NE(st.message().find("PNG"), std::string::npos) << st.message();
  }
  std::vector<uint8_t> flipped = png;
  flipped[png.size() / 2] ^= 0x5a;  // inside IDAT: CRC mismatch
  expect_corrupt(flipped, {}, "flipped png").IgnoreError();

  // Garbage in the middle of JPEG entropy data must not crash; it usually decodes.
  std::vector<uint8_t> noisy = jpg;
  for (size_t i = jpg.size() / 2; i < jpg.size() / 2 + 32; ++i) noisy[i] = static_cast<uint8_t>(i * 37);
  DecodeImage(noisy.data(), noisy.size(), {}, &img).IgnoreError();
}

TEST(ImageCodec, KeepsPixelCapacityBetweenCalls) {
  auto big = Jpeg(SyntheticRgb(120, 90, 12), 120, 90);
  auto small = Jpeg(SyntheticRgb(20, 10, 13), 20, 10);
  DecodedImage img;
  ASSERT_TRUE(DecodeImage(big.data(), big.size(), {}, &img).ok());
  const size_t cap = img.pixels.capacity();
  const uint8_t* data = img.pixels.data();
  ASSERT_TRUE(DecodeImage(small.data(), small.size(), {}, &img).ok());
  EXPECT_EQ(img.pixels.size(), 20u * 10 * 3);
  EXPECT_EQ(img.pixels.capacity(), cap);
  ASSERT_TRUE(DecodeImage(big.data(), big.size(), {}, &img).ok());
  EXPECT_EQ(img.pixels.data(), data);
}

TEST(ImageCodec, DecodesConcurrentlyWithSameResults) {
  auto jpg = Jpeg(SyntheticRgb(96, 64, 14), 96, 64);
  DecodedImage ref = MustDecode(jpg);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      DecodedImage img;  // NOLINT
      for (int i = 0; i < 20; ++i) {
        std::vector<uint8_t> data = (i % 3 == 0) ? std::vector<uint8_t>(jpg.begin(), jpg.begin() + 100)
                                                 : jpg;
        Status st = DecodeImage(data.data(), data.size(), {}, &img);
        if (i % 3 == 0) {
          mismatches[t] += st.ok();
        } else {
          mismatches[t] += !st.ok() || img.pixels != ref.pixels;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(ImageCodec, EncoderRejectsBadArguments) {
  std::vector<uint8_t> out, px(12, 0);
  EXPECT_EQ(EncodeJpeg(px.data(), 0, 2, 90, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeJpeg(px.data(), 2, 2, 0, &out).code(), StatusCode::kInvalidArgument);
  JpegEncodeOptions o;
  o.components = 2;
  EXPECT_EQ(EncodeJpegEx(px.data(), 2, 2, o, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePngEx(px.data(), 2, 2, 3, 12, &out).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

// `jpg` with an APP1 Exif segment (big- or little-endian TIFF) carrying `orientation`.
std::vector<uint8_t> WithExifOrientation(const std::vector<uint8_t>& jpg, int orientation,
                                         bool little_endian) {
  auto be16 = [&](std::vector<uint8_t>& v, int x) {
    if (little_endian) {
      v.push_back(x & 0xff);
      v.push_back((x >> 8) & 0xff);
    } else {
      v.push_back((x >> 8) & 0xff);
      v.push_back(x & 0xff);
    }
  };
  auto be32 = [&](std::vector<uint8_t>& v, uint32_t x) {
    if (little_endian) {
      be16(v, x & 0xffff);
      be16(v, x >> 16);
    } else {
      be16(v, x >> 16);
      be16(v, x & 0xffff);
    }
  };
  std::vector<uint8_t> tiff = {static_cast<uint8_t>(little_endian ? 'I' : 'M'),
                               static_cast<uint8_t>(little_endian ? 'I' : 'M')};
  be16(tiff, 42);
  be32(tiff, 8);
  be16(tiff, 2);  // two entries: an unrelated tag first
  be16(tiff, 0x010f); be16(tiff, 2); be32(tiff, 4); tiff.insert(tiff.end(), {'a', 'b', 'c', 0});
  be16(tiff, 0x0112); be16(tiff, 3); be32(tiff, 1); be16(tiff, orientation); be16(tiff, 0);
  be32(tiff, 0);
  std::vector<uint8_t> out(jpg.begin(), jpg.begin() + 2);
  const size_t len = 2 + 6 + tiff.size();
  out.insert(out.end(), {0xff, 0xe1, static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len)});
  out.insert(out.end(), {'E', 'x', 'i', 'f', 0, 0});
  out.insert(out.end(), tiff.begin(), tiff.end());
  out.insert(out.end(), jpg.begin() + 2, jpg.end());
  return out;
}

// Pixel (x, y) of the displayed image, from the stored one (w x h), per EXIF orientation.
const uint8_t* StoredPixel(const DecodedImage& stored, int o, int x, int y) {
  const int w = stored.width, h = stored.height;
  int sx = x, sy = y;
  switch (o) {
    case 2: sx = w - 1 - x; break;
    case 3: sx = w - 1 - x; sy = h - 1 - y; break;
    case 4: sy = h - 1 - y; break;
    case 5: sx = y; sy = x; break;
    case 6: sx = y; sy = h - 1 - x; break;
    case 7: sx = w - 1 - y; sy = h - 1 - x; break;
    case 8: sx = w - 1 - y; sy = x; break;
    default: break;
  }
  return &stored.pixels[(static_cast<size_t>(sy) * w + sx) * 3];
}

TEST(ImageCodec, ExifOrientationIsReadAndAppliedOnlyWhenAsked) {
  const int w = 64, h = 48;
  auto rgb = testing::SyntheticRgb(w, h, 3);
  JpegEncodeOptions q;
  q.quality = 95;
  q.subsampling = ChromaSubsampling::k444;
  auto plain = Jpeg(rgb, w, h, q);
  const DecodedImage stored = MustDecode(plain);
  for (int o = 1; o <= 8; ++o) {
    auto jpg = WithExifOrientation(plain, o, /*little_endian=*/o % 2 == 0);
    EXPECT_EQ(ReadJpegExifOrientation(jpg.data(), jpg.size()), o);
    auto info = ReadImageInfo(jpg.data(), jpg.size());
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->orientation, o);
    EXPECT_EQ(info->width, w);  // the stored size
    int dw = 0, dh = 0;
    DisplayedSize(*info, &dw, &dh);
    EXPECT_EQ(dw, o >= 5 ? h : w);
    // Off (the default): decoded as stored.
    EXPECT_EQ(MustDecode(jpg).pixels, stored.pixels) << o;
    // On: the displayed image, exactly the stored pixels moved.
    DecodeRequest on;
    on.exif_orientation = true;
    DecodedImage shown = MustDecode(jpg, on);
    ASSERT_EQ(shown.width, dw);
    ASSERT_EQ(shown.height, dh);
    EXPECT_EQ(shown.source_width, dw);
    bool same = true;
    for (int y = 0; y < dh && same; ++y) {
      for (int x = 0; x < dw && same; ++x) {
        same = std::memcmp(&shown.pixels[(static_cast<size_t>(y) * dw + x) * 3],
                           StoredPixel(stored, o, x, y), 3) == 0;
      }
    }
    EXPECT_TRUE(same) << "orientation " << o;
    // A region of the displayed image (region decode of the stored one) is that region.
    DecodeRequest region = on;
    region.crop = CropRect{5, 7, 20, 17};
    DecodedImage part = MustDecode(jpg, region);
    DecodedRect r = SourceToDecoded(part, 5, 7, 20, 17);
    ASSERT_GE(r.x, 0);
    ASSERT_LE(r.x + r.w, part.width + 1e-9);
    const int px = static_cast<int>(r.x), py = static_cast<int>(r.y);
    for (int y = 0; y < 17; ++y) {
      EXPECT_EQ(0, std::memcmp(&part.pixels[(static_cast<size_t>(py + y) * part.width + px) * 3],
                               &shown.pixels[(static_cast<size_t>(7 + y) * dw + 5) * 3], 20 * 3))
          << "orientation " << o << " row " << y;
    }
    // DCT-scaled (64 and 48 are multiples of 8/M): the same geometry, at half size.
    DecodeRequest half = on;
    half.target_w = dw / 2;
    half.target_h = dh / 2;
    DecodedImage small = MustDecode(jpg, half);
    EXPECT_EQ(small.scale_num, 4);
    EXPECT_EQ(small.width, dw / 2);
    EXPECT_EQ(small.height, dh / 2);
  }
}

TEST(ImageCodec, MalformedExifMeansNoOrientation) {
  const int w = 16, h = 8;
  auto plain = Jpeg(testing::SyntheticRgb(w, h, 1), w, h);
  auto jpg = WithExifOrientation(plain, 6, false);
  EXPECT_EQ(ReadJpegExifOrientation(jpg.data(), jpg.size()), 6);
  // Orientation values outside 1..8, a cut segment, a bad byte-order mark: all 1.
  auto bad_value = WithExifOrientation(plain, 9, false);
  EXPECT_EQ(ReadJpegExifOrientation(bad_value.data(), bad_value.size()), 1);
  const size_t app1_end = 2 + 2 + ((size_t{jpg[4]} << 8) | jpg[5]);  // SOI, marker, length
  for (size_t cut = 3; cut < app1_end; cut += 3) {
    EXPECT_EQ(ReadJpegExifOrientation(jpg.data(), cut), 1) << cut;
  }
  auto bom = jpg;
  bom[12] = 'X';  // "MM" -> "XM"
  EXPECT_EQ(ReadJpegExifOrientation(bom.data(), bom.size()), 1);
  // The file still decodes, as stored.
  DecodeRequest on;
  on.exif_orientation = true;
  EXPECT_EQ(MustDecode(bom, on).width, w);
  EXPECT_EQ(ReadJpegExifOrientation(nullptr, 0), 1);
}

}  // namespace
}  // namespace stoker
