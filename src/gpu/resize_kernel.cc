#include "gpu/resize_kernel.h"

namespace stoker::gpu {

void RunResizeJobsOnHost(const ResizeJob* jobs, const ResizeLaunch& L) {
  for (int i = 0; i < L.num_jobs; ++i) {
    const ResizeJob& j = jobs[i];
    if (j.src == 0) continue;
    const auto* src = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(j.src));
    void* dst = reinterpret_cast<void*>(static_cast<uintptr_t>(j.dst));
    for (int oy = 0; oy < L.out_h; ++oy)
      for (int ox = 0; ox < L.out_w; ++ox) ResizePixel(j, L, src, dst, ox, oy);
  }
}

}  // namespace stoker::gpu
