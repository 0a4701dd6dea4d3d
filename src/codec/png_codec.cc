// PNG decode and encode through libpng's classic API (setjmp error handling).
//
// Decode output is 8-bit RGB the way PIL's Image.open(f).convert("RGB") gives it, for
// every PNG colour type and depth: palette expanded (tRNS ignored), 1/2/4-bit gray scaled
// to 0..255, gray replicated, alpha dropped (not composited), 16-bit RGB, RGBA and gray+
// alpha reduced to their high byte (png_set_strip_16, PIL's "RGB;16B"/"RGBA;16B"/"LA;16B"
// raw modes), and 16-bit gray *clipped* to 0..255 (PIL opens it as mode "I" and its
// I -> RGB conversion clips: a sample of 256 or more is 255, not its high byte).
// Non-interlaced images are read row by row and stop after the crop's last row;
// interlaced ones are read whole into a per-thread scratch image.
#include <cstdint>
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <vector>

#include "codec/image_internal.h"

namespace stoker::codec_internal {
namespace {

struct PngReadCtx {
  const uint8_t* data;
  size_t n;
  size_t pos;
  char msg[256];
};

[[noreturn]] void PngError(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngReadCtx*>(png_get_error_ptr(png));
  if (ctx != nullptr) {
    std::strncpy(ctx->msg, msg != nullptr ? msg : "unknown error", sizeof(ctx->msg) - 1);
    ctx->msg[sizeof(ctx->msg) - 1] = 0;
  }
  png_longjmp(png, 1);
}

void PngWarning(png_structp, png_const_charp) {}

void PngRead(png_structp png, png_bytep dst, size_t len) {
  auto* ctx = static_cast<PngReadCtx*>(png_get_io_ptr(png));
  if (ctx->n - ctx->pos < len) png_error(png, "truncated PNG data");
  std::memcpy(dst, ctx->data + ctx->pos, len);
  ctx->pos += len;
}

uint32_t ReadBE32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// 16-bit big-endian gray samples -> RGB, clipped to 0..255 (PIL's I -> RGB).
void ClipGray16Row(const uint8_t* src, int n, uint8_t* dst) {
  for (int i = 0; i < n; ++i, src += 2, dst += 3) {
    const uint8_t v = src[0] != 0 ? 255 : src[1];
    dst[0] = dst[1] = dst[2] = v;
  }
}

struct PngScratch {
  std::vector<uint8_t> image;  // whole image for interlaced files
  std::vector<uint8_t> row;
};

PngScratch* ThreadScratch() {
  thread_local PngScratch s;
  return &s;
}

// Runs under setjmp; only PODs and pointers as locals.
void DecodePngInner(png_structp png, png_infop info, const DecodeRequest& req,
                    PngScratch* scratch, DecodedImage* out, Status* st) {
  png_read_info(png, info);
  png_uint_32 width = 0, height = 0;
  int depth = 0, color = 0, interlace = 0;
  png_get_IHDR(png, info, &width, &height, &depth, &color, &interlace, nullptr, nullptr);
  const int w_img = static_cast<int>(width), h_img = static_cast<int>(height);
  *st = CheckImageSize(w_img, h_img);
  if (!st->ok()) return;
  CropRect crop;
  *st = ClipCrop(req.crop, w_img, h_img, &crop);
  if (!st->ok()) return;

  // 16-bit gray is read as 16-bit gray and clipped here (ClipGray16Row); the rest is
  // libpng's transforms to 8-bit RGB.
  const bool gray16 = color == PNG_COLOR_TYPE_GRAY && depth == 16;
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0 && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !gray16) png_set_strip_16(png);
  // Palette expansion turns tRNS into alpha; drop it like real alpha.
  if ((color & PNG_COLOR_MASK_ALPHA) || color == PNG_COLOR_TYPE_PALETTE) png_set_strip_alpha(png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0 && !gray16) png_set_gray_to_rgb(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t rowbytes = png_get_rowbytes(png, info);
  if (rowbytes != static_cast<size_t>(w_img) * (gray16 ? 2 : 3)) {
    *st = Corrupt("PNG: unexpected row size {} for width {}", rowbytes, w_img);
    return;
  }

  int x0 = 0, y0 = 0, w = w_img, h = h_img;
  if (req.allow_region_decode) {
    x0 = crop.x;
    y0 = crop.y;
    w = crop.w;
    h = crop.h;
  }
  out->width = w;
  out->height = h;
  out->crop = crop;
  out->scale_num = 8;
  out->offset_x = x0;
  out->offset_y = y0;
  out->source_width = w_img;
  out->source_height = h_img;
  const size_t stride = static_cast<size_t>(w) * 3;
  out->pixels.resize(stride * h);

  // One decoded row (rowbytes, from column 0) -> the output row (w RGB pixels from x0).
  auto emit = [&](const uint8_t* row, uint8_t* dst) {
    if (gray16) {
      ClipGray16Row(row + static_cast<size_t>(x0) * 2, w, dst);
    } else {
      std::memcpy(dst, row + static_cast<size_t>(x0) * 3, stride);
    }
  };
  if (passes > 1) {
    scratch->image.resize(rowbytes * h_img);
    for (int p = 0; p < passes; ++p) {
      for (int y = 0; y < h_img; ++y) {
        png_read_row(png, scratch->image.data() + rowbytes * y, nullptr);
      }
    }
    for (int y = 0; y < h; ++y) {
      emit(scratch->image.data() + rowbytes * (y0 + y), out->pixels.data() + stride * y);
    }
    return;
  }
  const bool whole_rows = x0 == 0 && w == w_img && !gray16;
  scratch->row.resize(rowbytes);
  for (int y = 0; y < y0 + h; ++y) {
    if (y >= y0 && whole_rows) {
      png_read_row(png, out->pixels.data() + stride * (y - y0), nullptr);
      continue;
    }
    png_read_row(png, scratch->row.data(), nullptr);
    if (y >= y0) emit(scratch->row.data(), out->pixels.data() + stride * (y - y0));
  }
}

struct PngWriteCtx {
  std::vector<uint8_t>* out;
  char msg[256];
};

void PngWrite(png_structp png, png_bytep src, size_t len) {
  auto* ctx = static_cast<PngWriteCtx*>(png_get_io_ptr(png));
  ctx->out->insert(ctx->out->end(), src, src + len);
}
void PngFlush(png_structp) {}

[[noreturn]] void PngWriteError(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngWriteCtx*>(png_get_error_ptr(png));
  std::strncpy(ctx->msg, msg != nullptr ? msg : "unknown error", sizeof(ctx->msg) - 1);
  ctx->msg[sizeof(ctx->msg) - 1] = 0;
  png_longjmp(png, 1);
}

}  // namespace

Status DecodePng(const uint8_t* data, size_t n, const DecodeRequest& req, DecodedImage* out) {
  PngReadCtx ctx{data, n, 0, {0}};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, PngError, PngWarning);
  if (png == nullptr) return Internal("PNG: cannot create a decoder");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return Internal("PNG: cannot create a decoder");
  }
  Status st;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Corrupt("PNG: {}", ctx.msg);
  }
  png_set_read_fn(png, &ctx, PngRead);
  DecodePngInner(png, info, req, ThreadScratch(), out, &st);
  png_destroy_read_struct(&png, &info, nullptr);
  return st;
}

Result<ImageInfo> ReadPngInfo(const uint8_t* data, size_t n) {
  // Signature (8) + IHDR length (4) + "IHDR" (4) + 13 bytes of IHDR data.
  if (n < 8 + 8 + 13) return Corrupt("PNG: truncated header ({} bytes)", n);
  if (ReadBE32(data + 8) != 13 || std::memcmp(data + 12, "IHDR", 4) != 0) {
    return Corrupt("PNG: first chunk is not IHDR");
  }
  const uint32_t w = ReadBE32(data + 16), h = ReadBE32(data + 20);
  const int depth = data[24], color = data[25];
  if (w == 0 || h == 0 || w > 0x7fffffffu || h > 0x7fffffffu) {
    return Corrupt("PNG: bad size {}x{}", w, h);
  }
  ImageInfo info;
  info.width = static_cast<int>(w);
  info.height = static_cast<int>(h);
  info.format = ImageFormat::kPng;
  switch (color) {
    case 0: info.channels = 1; break;
    case 2: info.channels = 3; break;
    case 3: info.channels = 3; break;  // palette entries are RGB
    case 4: info.channels = 2; break;
    case 6: info.channels = 4; break;
    default: return Corrupt("PNG: bad color type {}", color);
  }
  if (depth != 1 && depth != 2 && depth != 4 && depth != 8 && depth != 16) {
    return Corrupt("PNG: bad bit depth {}", depth);
  }
  return info;
}

}  // namespace stoker::codec_internal

namespace stoker {

Status EncodePngEx(const uint8_t* pixels, int width, int height, int channels, int bit_depth,
                   std::vector<uint8_t>* out) {
  if (width <= 0 || height <= 0) return InvalidArgument("EncodePng: bad size {}x{}", width, height);
  if (channels < 1 || channels > 4) return InvalidArgument("EncodePng: bad channels {}", channels);
  if (bit_depth != 8 && bit_depth != 16) {
    return InvalidArgument("EncodePng: bit depth must be 8 or 16, not {}", bit_depth);
  }
  static constexpr int kColor[5] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                    PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
  out->clear();
  codec_internal::PngWriteCtx ctx{out, {0}};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &ctx,
                                            codec_internal::PngWriteError,
                                            codec_internal::PngWarning);
  if (png == nullptr) return Internal("PNG: cannot create an encoder");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    return Internal("PNG: cannot create an encoder");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return Internal("PNG encode: {}", ctx.msg);
  }
  png_set_write_fn(png, &ctx, codec_internal::PngWrite, codec_internal::PngFlush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height),
               bit_depth, kColor[channels], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const size_t stride = static_cast<size_t>(width) * channels * (bit_depth / 8);
  for (int y = 0; y < height; ++y) {
    png_write_row(png, const_cast<uint8_t*>(pixels + stride * y));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return Status::OK();
}

Status EncodePng(const uint8_t* rgb, int width, int height, std::vector<uint8_t>* out) {
  return EncodePngEx(rgb, width, height, 3, 8, out);
}

}  // namespace stoker
