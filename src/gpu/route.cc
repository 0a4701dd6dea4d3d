#include <cstdint>
#include "gpu/route.h"

#include "codec/image.h"

namespace stoker::gpu {

const char* DecodeRouteName(DecodeRoute r) {
  switch (r) {
    case DecodeRoute::kCpu: return "cpu";
    case DecodeRoute::kGpuHostHuffman: return "gpu-host-huffman";
    case DecodeRoute::kGpuDeviceHuffman: return "gpu-device-huffman";
  }
  return "?";
}

const char* FallbackReasonName(FallbackReason r) {
  switch (r) {
    case FallbackReason::kNone: return "none";
    case FallbackReason::kNotJpeg: return "not-jpeg";
    case FallbackReason::kCmyk: return "cmyk";
    case FallbackReason::kProgressive: return "progressive";
    case FallbackReason::kArithmetic: return "arithmetic";
    case FallbackReason::kUnsupportedCoding: return "unsupported-coding";
    case FallbackReason::kPrecision: return "precision";
    case FallbackReason::kCorrupt: return "corrupt";
    case FallbackReason::kGpuRejected: return "gpu-rejected";
    case FallbackReason::kGpuMemory: return "gpu-memory";
    case FallbackReason::kOrientation: return "exif-orientation";
    case FallbackReason::kCount: break;
  }
  return "?";
}

RouteDecision RouteImage(const uint8_t* data, size_t n, const HybridPolicy& policy) {
  RouteDecision d;
  if (DetectImageFormat(data, n) != ImageFormat::kJpeg) {
    d.reason = FallbackReason::kNotJpeg;
    return d;
  }
  auto t = ProbeJpeg(data, n);
  if (!t.ok()) {
    d.reason = FallbackReason::kCorrupt;
    d.detail = t.status().message();
    return d;
  }
  d.traits = *t;
  const JpegTraits& j = d.traits;
  if (j.arithmetic) {
    d.reason = FallbackReason::kArithmetic;
  } else if (j.coding == JpegCoding::kProgressive) {
    d.reason = FallbackReason::kProgressive;
  } else if (j.coding == JpegCoding::kLossless || j.coding == JpegCoding::kHierarchical) {
    d.reason = FallbackReason::kUnsupportedCoding;
  } else if (j.precision != 8) {
    d.reason = FallbackReason::kPrecision;
  } else if (j.cmyk()) {
    d.reason = FallbackReason::kCmyk;
  } else if (j.components == 2) {
    d.reason = FallbackReason::kUnsupportedCoding;
  } else {
    const int64_t pixels = static_cast<int64_t>(j.width) * j.height;
    d.route = policy.device_huffman_available && pixels > policy.device_huffman_min_pixels
                  ? DecodeRoute::kGpuDeviceHuffman
                  : DecodeRoute::kGpuHostHuffman;
  }
  return d;
}

int64_t FallbackCounts::total() const {
  int64_t s = 0;
  for (size_t i = 1; i < n.size(); ++i) s += n[i];
  return s;
}

std::string FallbackCounts::ToString() const {
  std::string out;
  for (size_t i = 1; i < n.size(); ++i) {
    if (n[i] == 0) continue;
    if (!out.empty()) out += ' ';
    out += fmt::format("{}={}", FallbackReasonName(static_cast<FallbackReason>(i)), n[i]);
  }
  return out.empty() ? "none" : out;
}

BatchSplit SplitBatch(const std::vector<const uint8_t*>& data, const std::vector<size_t>& sizes,
                      const HybridPolicy& policy) {
  BatchSplit s;
  s.decisions.reserve(data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    s.decisions.push_back(RouteImage(data[i], sizes[i], policy));
    const int idx = static_cast<int>(i);
    switch (s.decisions.back().route) {
      case DecodeRoute::kCpu: s.cpu.push_back(idx); break;
      case DecodeRoute::kGpuHostHuffman: s.host_huffman.push_back(idx); break;
      case DecodeRoute::kGpuDeviceHuffman: s.device_huffman.push_back(idx); break;
    }
  }
  return s;
}

}  // namespace stoker::gpu
