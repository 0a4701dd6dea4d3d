// JPEG decode and encode through the libjpeg API of libjpeg-turbo.
//
// Decode: one jpeg_decompress_struct per thread, created once and reset with
// jpeg_abort_decompress after every image (what TurboJPEG does with its handle), so the
// hot path allocates only libjpeg's per-image pools. DCT-domain scaling (scale_num/8),
// columns through jpeg_crop_scanline (which widens to an iMCU boundary; we trim), rows
// through jpeg_skip_scanlines and stopping early.
//
// Errors: error_exit longjmps back to the decode function, which returns kCorrupt with
// libjpeg's message. Warnings that mean lost image data (premature end of file, a marker
// inside entropy-coded data, bad Huffman/arithmetic codes, resync) are treated as
// kCorrupt too: a truncated file never decodes to a gray-filled image. Benign warnings
// (extraneous bytes before a marker, unknown JFIF versions, ...) are ignored. libjpeg
// never prints (output_message is a no-op).
#include <cstdint>
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <vector>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <jerror.h>

#include "codec/image_internal.h"

namespace stoker {
namespace codec_internal {
namespace {

struct JpegErrorMgr {
  jpeg_error_mgr pub;
  jmp_buf jmp;
  char msg[JMSG_LENGTH_MAX];
};

[[noreturn]] void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorMgr*>(cinfo->err);
  cinfo->err->format_message(cinfo, err->msg);
  longjmp(err->jmp, 1);
}

bool IsDataLossWarning(int code) {
  switch (code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_MUST_RESYNC:
      return true;
    default:
      return false;
  }
}

void EmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace messages
  if (IsDataLossWarning(cinfo->err->msg_code)) ErrorExit(cinfo);
  cinfo->err->num_warnings++;
}

void OutputMessage(j_common_ptr) {}

// Per-thread decoder state. Everything touched between setjmp and longjmp lives here
// (not in locals of the function that calls setjmp).
struct JpegDecoder {
  jpeg_decompress_struct cinfo;
  JpegErrorMgr err;
  bool ok = false;
  std::vector<uint8_t> rows;  // scratch scanlines when trimming or converting CMYK

  JpegDecoder() {
    std::memset(&cinfo, 0, sizeof(cinfo));
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = ErrorExit;
    err.pub.emit_message = EmitMessage;
    err.pub.output_message = OutputMessage;
    if (setjmp(err.jmp)) return;  // out of memory creating the object
    jpeg_create_decompress(&cinfo);
    ok = true;
  }
  ~JpegDecoder() {
    if (ok) jpeg_destroy_decompress(&cinfo);
  }
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;
};

JpegDecoder* ThreadDecoder() {
  thread_local JpegDecoder decoder;
  return decoder.ok ? &decoder : nullptr;
}

// x * num / den rounded down / up, for non-negative x.
inline int FloorScale(int x, int num) { return static_cast<int>((int64_t{x} * num) / 8); }
inline int CeilScale(int x, int num) { return static_cast<int>((int64_t{x} * num + 7) / 8); }

// PIL's CMYK -> RGB: PIL reads every 4-component JPEG as Adobe's inverted CMYK
// (JpegImagePlugin's rawmode "CMYK;I", "assume adobe conventions", with or without an
// APP14 Adobe marker) and converts with r = (255 - c) * (255 - k) / 255, which on the
// stored, inverted samples c' = 255 - c is r = c' * k' / 255, with PIL's rounding.
inline uint8_t MulDiv255(int a, int b) {
  int t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

void CmykRowToRgb(const uint8_t* src, int n, uint8_t* dst) {
  for (int i = 0; i < n; ++i, src += 4, dst += 3) {
    dst[0] = MulDiv255(src[0], src[3]);
    dst[1] = MulDiv255(src[1], src[3]);
    dst[2] = MulDiv255(src[2], src[3]);
  }
}

// The part of a decode that runs under setjmp. Returns false after a libjpeg error
// (message in d->err.msg). Only PODs and pointers as locals.
bool DecodeJpegInner(JpegDecoder* d, const uint8_t* data, size_t n, const DecodeRequest& req,
                     DecodedImage* out, Status* st) {
  jpeg_decompress_struct* cinfo = &d->cinfo;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(n));
  jpeg_read_header(cinfo, TRUE);
  const int src_w = static_cast<int>(cinfo->image_width);
  const int src_h = static_cast<int>(cinfo->image_height);
  CropRect crop;
  *st = ClipCrop(req.crop, src_w, src_h, &crop);
  if (!st->ok()) return true;
  *st = CheckImageSize(src_w, src_h);
  if (!st->ok()) return true;

  const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  int scale = 8;
  if (req.allow_dct_scale && req.target_w > 0 && req.target_h > 0) {
    scale = ChooseDctScale(crop.w, crop.h, req.target_w, req.target_h, req.any_dct_scale);
  }
  cinfo->scale_num = static_cast<unsigned>(scale);
  cinfo->scale_denom = 8;
  cinfo->dct_method = req.fast_dct ? JDCT_IFAST : JDCT_ISLOW;
  cinfo->do_fancy_upsampling = req.fast_upsampling ? FALSE : TRUE;
  cinfo->do_block_smoothing = TRUE;
  jpeg_start_decompress(cinfo);

  const int out_w = static_cast<int>(cinfo->output_width);
  const int out_h = static_cast<int>(cinfo->output_height);
  int x0 = 0, x1 = out_w, y0 = 0, y1 = out_h;
  if (req.allow_region_decode) {
    x0 = FloorScale(crop.x, scale);
    x1 = CeilScale(crop.x + crop.w, scale);
    y0 = FloorScale(crop.y, scale);
    y1 = CeilScale(crop.y + crop.h, scale);
    if (x1 > out_w) x1 = out_w;
    if (y1 > out_h) y1 = out_h;
    if (x0 >= x1) x0 = x1 - 1;
    if (y0 >= y1) y0 = y1 - 1;
  }
  const int w = x1 - x0, h = y1 - y0;

  // Columns: the decoder's window starts at iMCU boundary `win_x` <= x0.
  int win_x = 0;
  int win_w = out_w;
  if (x0 > 0 || x1 < out_w) {
    // Fancy upsampling treats the window's edges as image edges, so a window that ends
    // exactly at the crop changes the crop's border pixels. Ask for one more pixel on the
    // left (the window then starts an iMCU earlier when x0 is on a boundary) and one iMCU
    // more on the right; the trim below removes them again.
#if JPEG_LIB_VERSION >= 70  // libjpeg 7+ API (libjpeg-turbo built with --with-jpeg7/8)
    const int imcu = cinfo->max_h_samp_factor * cinfo->min_DCT_h_scaled_size;
#else
    const int imcu = cinfo->max_h_samp_factor * cinfo->min_DCT_scaled_size;
#endif
    const int req_x0 = x0 > 0 ? x0 - 1 : 0;
    const int req_x1 = x1 + imcu < out_w ? x1 + imcu : out_w;
    JDIMENSION xoff = static_cast<JDIMENSION>(req_x0);
    JDIMENSION cw = static_cast<JDIMENSION>(req_x1 - req_x0);
    jpeg_crop_scanline(cinfo, &xoff, &cw);
    win_x = static_cast<int>(xoff);
    win_w = static_cast<int>(cw);
  }
  const int trim = x0 - win_x;
  if (y0 > 0) jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(y0));

  out->width = w;
  out->height = h;
  out->crop = crop;
  out->scale_num = scale;
  out->offset_x = x0;
  out->offset_y = y0;
  out->source_width = src_w;
  out->source_height = src_h;
  const size_t stride = static_cast<size_t>(w) * 3;
  out->pixels.resize(stride * h);

  const int comps = cmyk ? 4 : 3;
  const bool direct = !cmyk && trim == 0 && win_w == w;
  constexpr int kBatch = 8;
  JSAMPROW rowptr[kBatch];
  if (!direct) d->rows.resize(static_cast<size_t>(win_w) * comps * kBatch);
  int row = 0;
  while (row < h) {
    int want = h - row < kBatch ? h - row : kBatch;
    for (int k = 0; k < want; ++k) {
      rowptr[k] = direct ? out->pixels.data() + (row + k) * stride
                         : d->rows.data() + static_cast<size_t>(k) * win_w * comps;
    }
    int got = static_cast<int>(jpeg_read_scanlines(cinfo, rowptr, static_cast<JDIMENSION>(want)));
    if (got <= 0) {
      *st = Corrupt("JPEG: decoder returned no scanlines at row {}", y0 + row);
      return true;
    }
    if (!direct) {
      for (int k = 0; k < got; ++k) {
        const uint8_t* src = rowptr[k] + static_cast<size_t>(trim) * comps;
        uint8_t* dst = out->pixels.data() + (row + k) * stride;
        if (cmyk) {
          CmykRowToRgb(src, w, dst);
        } else {
          std::memcpy(dst, src, stride);
        }
      }
    }
    row += got;
  }
  if (y1 == out_h) {
    jpeg_finish_decompress(cinfo);  // reads to EOI: catches a file cut after the last row
  } else {
    jpeg_abort_decompress(cinfo);
  }
  return true;
}

bool ReadJpegInfoInner(JpegDecoder* d, const uint8_t* data, size_t n, ImageInfo* info) {
  jpeg_decompress_struct* cinfo = &d->cinfo;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(n));
  jpeg_read_header(cinfo, TRUE);
  info->width = static_cast<int>(cinfo->image_width);
  info->height = static_cast<int>(cinfo->image_height);
  info->channels = cinfo->num_components;
  info->format = ImageFormat::kJpeg;
  jpeg_abort_decompress(cinfo);
  return true;
}

// --- encoder ------------------------------------------------------------------------

struct VectorDest {
  jpeg_destination_mgr pub;
  std::vector<uint8_t>* out;
};

void InitDest(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<VectorDest*>(cinfo->dest);
  if (d->out->size() < 65536) d->out->resize(65536);
  d->pub.next_output_byte = d->out->data();
  d->pub.free_in_buffer = d->out->size();
}

boolean EmptyDest(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<VectorDest*>(cinfo->dest);
  size_t used = d->out->size();
  d->out->resize(used * 2);
  d->pub.next_output_byte = d->out->data() + used;
  d->pub.free_in_buffer = d->out->size() - used;
  return TRUE;
}

void TermDest(j_compress_ptr cinfo) {
  auto* d = reinterpret_cast<VectorDest*>(cinfo->dest);
  d->out->resize(d->out->size() - d->pub.free_in_buffer);
}

struct JpegEncoder {
  jpeg_compress_struct cinfo;
  JpegErrorMgr err;
  VectorDest dest;
};

bool EncodeInner(JpegEncoder* e, const uint8_t* pixels, int width, int height,
                 const JpegEncodeOptions& opts, std::vector<uint8_t>* out) {
  jpeg_compress_struct* cinfo = &e->cinfo;
  e->dest.pub.init_destination = InitDest;
  e->dest.pub.empty_output_buffer = EmptyDest;
  e->dest.pub.term_destination = TermDest;
  e->dest.out = out;
  cinfo->dest = &e->dest.pub;
  cinfo->image_width = static_cast<JDIMENSION>(width);
  cinfo->image_height = static_cast<JDIMENSION>(height);
  cinfo->input_components = opts.components;
  cinfo->in_color_space = opts.components == 1   ? JCS_GRAYSCALE
                          : opts.components == 4 ? JCS_CMYK
                                                 : JCS_RGB;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, opts.quality, TRUE);
  if (opts.components == 3) {
    int h = opts.subsampling == ChromaSubsampling::k444 ? 1 : 2;
    int v = opts.subsampling == ChromaSubsampling::k420 ? 2 : 1;
    cinfo->comp_info[0].h_samp_factor = h;
    cinfo->comp_info[0].v_samp_factor = v;
  } else if (opts.components == 4) {
    for (int c = 0; c < 4; ++c) {
      cinfo->comp_info[c].h_samp_factor = 1;
      cinfo->comp_info[c].v_samp_factor = 1;
    }
  }
  if (opts.progressive) jpeg_simple_progression(cinfo);
  if (opts.arithmetic) cinfo->arith_code = TRUE;
  jpeg_start_compress(cinfo, TRUE);
  const size_t stride = static_cast<size_t>(width) * opts.components;
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels + cinfo->next_scanline * stride);
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

}  // namespace

Status DecodeJpeg(const uint8_t* data, size_t n, const DecodeRequest& req, DecodedImage* out) {
  JpegDecoder* d = ThreadDecoder();
  if (d == nullptr) return Internal("JPEG: cannot create a decoder");
  Status st;
  if (setjmp(d->err.jmp)) {
    jpeg_abort_decompress(&d->cinfo);
    return Corrupt("JPEG: {}", d->err.msg);
  }
  DecodeJpegInner(d, data, n, req, out, &st);
  if (!st.ok()) jpeg_abort_decompress(&d->cinfo);
  return st;
}

Result<ImageInfo> ReadJpegInfo(const uint8_t* data, size_t n) {
  JpegDecoder* d = ThreadDecoder();
  if (d == nullptr) return Internal("JPEG: cannot create a decoder");
  ImageInfo info;
  if (setjmp(d->err.jmp)) {
    jpeg_abort_decompress(&d->cinfo);
    return Corrupt("JPEG: {}", d->err.msg);
  }
  ReadJpegInfoInner(d, data, n, &info);
  return info;
}

}  // namespace codec_internal

Status EncodeJpegEx(const uint8_t* pixels, int width, int height, const JpegEncodeOptions& opts,
                    std::vector<uint8_t>* out) {
  if (width <= 0 || height <= 0 || width > 65500 || height > 65500) {
    return InvalidArgument("EncodeJpeg: bad size {}x{}", width, height);
  }
  if (opts.components != 1 && opts.components != 3 && opts.components != 4) {
    return InvalidArgument("EncodeJpeg: components must be 1, 3 or 4, not {}", opts.components);
  }
  if (opts.quality < 1 || opts.quality > 100) {
    return InvalidArgument("EncodeJpeg: quality {} outside 1..100", opts.quality);
  }
  codec_internal::JpegEncoder e;
  std::memset(&e.cinfo, 0, sizeof(e.cinfo));
  e.cinfo.err = jpeg_std_error(&e.err.pub);
  e.err.pub.error_exit = codec_internal::ErrorExit;
  e.err.pub.emit_message = codec_internal::EmitMessage;
  e.err.pub.output_message = codec_internal::OutputMessage;
  out->clear();
  if (setjmp(e.err.jmp)) {
    jpeg_destroy_compress(&e.cinfo);
    return Internal("JPEG encode: {}", e.err.msg);
  }
  jpeg_create_compress(&e.cinfo);
  codec_internal::EncodeInner(&e, pixels, width, height, opts, out);
  jpeg_destroy_compress(&e.cinfo);
  return Status::OK();
}

Status EncodeJpeg(const uint8_t* rgb, int width, int height, int quality,
                  std::vector<uint8_t>* out) {
  JpegEncodeOptions opts;
  opts.quality = quality;
  return EncodeJpegEx(rgb, width, height, opts, out);
}

}  // namespace stoker
