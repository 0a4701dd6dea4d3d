#include <cstdint>
#include "gpu/resize_kernel.h"

namespace stoker::gpu {

ResizeJob JobFromPlan(const ResizePlan& plan, int src_w, int src_h, bool flip) {
  ResizeJob j;
  j.src_w = src_w;
  j.src_h = src_h;
  j.src_pitch = src_w * 3;
  j.win_x0 = plan.window.x;
  j.win_y0 = plan.window.y;
  j.win_x1 = plan.window.x + plan.window.w;
  j.win_y1 = plan.window.y + plan.window.h;
  j.box_x = plan.box.x;
  j.box_y = plan.box.y;
  j.box_w = plan.box.w;
  j.box_h = plan.box.h;
  j.min_support = 1.0f;
  j.flip = flip ? 1 : 0;
  return j;
}

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
