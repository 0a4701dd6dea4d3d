// libFuzzer target for the GPU path's JPEG header probe and router (src/gpu/jpeg_probe.h).
#include <cstddef>
#include <cstdint>

#include "gpu/route.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = stoker::gpu::ProbeJpeg(data, size);
  if (t.ok() && (t->width <= 0 || t->height <= 0 || t->components < 1 || t->components > 4))
    __builtin_trap();
  (void)stoker::gpu::RouteImage(data, size, stoker::gpu::HybridPolicy{});
  return 0;
}
