// The GPU path's fused crop/resize/flip/normalize kernel (math in resize_kernel.h).
// Compiled to PTX by nvcc when the build has STOKER_CUDA (CMakeLists.txt) and embedded in
// the library; loaded at run time with the driver API (cuModuleLoadData).
#include "gpu/resize_kernel.h"

using stoker::gpu::ResizeJob;
using stoker::gpu::ResizeLaunch;

extern "C" __global__ void stoker_resize_normalize(const ResizeJob* jobs, ResizeLaunch L) {
  const int job = blockIdx.y;
  if (job >= L.num_jobs) return;
  const int pixel = blockIdx.x * blockDim.x + threadIdx.x;
  if (pixel >= L.out_w * L.out_h) return;
  const ResizeJob j = jobs[job];
  if (j.src == 0) return;  // a CPU-fallback image: its slot was copied from the host
  stoker::gpu::ResizePixel(j, L, reinterpret_cast<const uint8_t*>(j.src),
                           reinterpret_cast<void*>(j.dst), pixel % L.out_w, pixel / L.out_w);
}
