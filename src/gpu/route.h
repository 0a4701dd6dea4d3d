// Which decoder each image of a batch goes to, decided before anything is submitted:
//
//   kCpu              the CPU path (libjpeg-turbo, the pipeline's own decode + augment):
//                     what nvJPEG does not decode -- PNG and other formats, CMYK/YCCK,
//                     progressive, arithmetic-coded, lossless/hierarchical, 12-bit, and
//                     headers that do not parse (corrupt);
//   kGpuHostHuffman   nvJPEG's hybrid backend: Huffman decoding on a CPU thread, IDCT and
//                     colour conversion on the GPU (faster for small images, as DALI's
//                     hybrid_huffman_threshold says);
//   kGpuDeviceHuffman nvJPEG's GPU-hybrid backend: Huffman decoding on the GPU too (large
//                     images, where the CPU's Huffman stage would be the bottleneck).
//
// An image nvJPEG still refuses at decode time is re-routed to the CPU with reason
// kGpuRejected (device_stage.cc); every CPU route is counted by reason.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/jpeg_probe.h"

namespace stoker::gpu {

enum class DecodeRoute { kCpu, kGpuHostHuffman, kGpuDeviceHuffman };
const char* DecodeRouteName(DecodeRoute r);

enum class FallbackReason {
  kNone,
  kNotJpeg,        // PNG or another format
  kCmyk,           // 4 components (CMYK / YCCK)
  kProgressive,
  kArithmetic,
  kUnsupportedCoding,  // lossless, hierarchical
  kPrecision,      // not 8-bit
  kCorrupt,        // the header does not parse
  kGpuRejected,    // nvJPEG returned an error for it
  kGpuMemory,      // no device memory for it in this batch
  kOrientation,    // exif_orientation=true and the JPEG is rotated (the GPU path decodes as stored)
  kCount,
};
const char* FallbackReasonName(FallbackReason r);  // "cmyk", "progressive", ...

struct HybridPolicy {
  // Images with more pixels than this decode their Huffman stage on the GPU; smaller ones
  // on the CPU (DALI's hybrid_huffman_threshold, whose default this is).
  int64_t device_huffman_min_pixels = 1000 * 1000;
  bool device_huffman_available = true;  // the GPU-hybrid backend could be created
};

struct RouteDecision {
  DecodeRoute route = DecodeRoute::kCpu;
  FallbackReason reason = FallbackReason::kNone;
  JpegTraits traits;   // when the header parsed
  std::string detail;  // the probe's error for kCorrupt
};

// Pure: the route of one encoded image.
RouteDecision RouteImage(const uint8_t* data, size_t n, const HybridPolicy& policy);

// Counts per fallback reason (kNone unused), summed over a run.
struct FallbackCounts {
  std::array<int64_t, static_cast<size_t>(FallbackReason::kCount)> n{};
  void Add(FallbackReason r) { ++n[static_cast<size_t>(r)]; }
  int64_t operator[](FallbackReason r) const { return n[static_cast<size_t>(r)]; }
  int64_t total() const;
  std::string ToString() const;  // "cmyk=2 progressive=1" (only non-zero reasons)
};

// A batch split by route: indices into the batch, in batch order.
struct BatchSplit {
  std::vector<int> cpu, host_huffman, device_huffman;
  std::vector<RouteDecision> decisions;  // one per image
};
BatchSplit SplitBatch(const std::vector<const uint8_t*>& data, const std::vector<size_t>& sizes,
                      const HybridPolicy& policy);

}  // namespace stoker::gpu
