// What a JPEG's header says about how it can be decoded: the frame type (baseline,
// extended, progressive, lossless, hierarchical; Huffman or arithmetic entropy coding),
// sample precision, components and the Adobe colour transform (CMYK/YCCK). Reads markers
// up to the first SOS only; never decodes. Used by the GPU path to route what nvJPEG does
// not decode to the CPU before it is submitted (route.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace stoker::gpu {

enum class JpegCoding {
  kBaseline,      // SOF0
  kExtended,      // SOF1 (Huffman, sequential)
  kProgressive,   // SOF2
  kLossless,      // SOF3
  kHierarchical,  // SOF5..7, SOF13..15 (differential)
  kArithmetic,    // SOF9..11 (arithmetic entropy coding), or a DAC segment
};
const char* JpegCodingName(JpegCoding c);

struct JpegTraits {
  JpegCoding coding = JpegCoding::kBaseline;
  bool arithmetic = false;   // SOF9..11 or DAC present
  int precision = 8;         // bits per sample
  int components = 0;
  int width = 0, height = 0;
  bool adobe = false;        // APP14 "Adobe" present
  int adobe_transform = -1;  // 0 none (RGB/CMYK), 1 YCbCr, 2 YCCK; -1 without APP14
  // Sampling factors of the components (h << 4 | v), up to 4.
  uint8_t sampling[4] = {0, 0, 0, 0};
  bool cmyk() const { return components == 4; }
};

// kCorrupt naming the byte offset when the header is malformed or ends before SOS.
Result<JpegTraits> ProbeJpeg(const uint8_t* data, size_t n);

}  // namespace stoker::gpu
