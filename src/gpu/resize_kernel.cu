// The GPU path's fused crop/resize/flip/normalize kernel (math in resize_kernel.h).
// Compiled to PTX by nvcc when the build has STOKER_CUDA (CMakeLists.txt) and embedded in
// the library; loaded at run time with the driver API (cuModuleLoadData).
// Two compilers: nvcc (the CUDA toolkit), or clang's CUDA front end with no CUDA
// installed at all (-nocudainc -nocudalib; CI builds the kernel that way, see
// CMakeLists.txt), for which the few CUDA names used here are declared below.
#if defined(__clang__) && defined(__CUDA__) && !defined(__CUDACC_VER_MAJOR__) && !defined(__CUDA_ARCH_LIST__) && defined(STOKER_CLANG_NOCUDAINC)
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __forceinline__ __inline__ __attribute__((always_inline))
struct StokerDim3 { unsigned x, y, z; };
__device__ static inline unsigned StokerCtaidX() { return __nvvm_read_ptx_sreg_ctaid_x(); }
__device__ static inline unsigned StokerCtaidY() { return __nvvm_read_ptx_sreg_ctaid_y(); }
__device__ static inline unsigned StokerTidX() { return __nvvm_read_ptx_sreg_tid_x(); }
__device__ static inline unsigned StokerNtidX() { return __nvvm_read_ptx_sreg_ntid_x(); }
#define STOKER_BLOCK_X StokerCtaidX()
#define STOKER_BLOCK_Y StokerCtaidY()
#define STOKER_THREAD_X StokerTidX()
#define STOKER_BLOCKDIM_X StokerNtidX()
__device__ static inline double floor(double x) { return __builtin_floor(x); }
__device__ static inline double ceil(double x) { return __builtin_ceil(x); }
#else
#define STOKER_BLOCK_X blockIdx.x
#define STOKER_BLOCK_Y blockIdx.y
#define STOKER_THREAD_X threadIdx.x
#define STOKER_BLOCKDIM_X blockDim.x
#endif

#include <cstdint>
#include "gpu/resize_kernel.h"

using stoker::gpu::ResizeJob;
using stoker::gpu::ResizeLaunch;

extern "C" __global__ void stoker_resize_normalize(const ResizeJob* jobs, ResizeLaunch L) {
  const int job = STOKER_BLOCK_Y;
  if (job >= L.num_jobs) return;
  const int pixel = STOKER_BLOCK_X * STOKER_BLOCKDIM_X + STOKER_THREAD_X;
  if (pixel >= L.out_w * L.out_h) return;
  const ResizeJob j = jobs[job];
  if (j.src == 0) return;  // a CPU-fallback image: its slot was copied from the host
  stoker::gpu::ResizePixel(j, L, reinterpret_cast<const uint8_t*>(j.src),
                           reinterpret_cast<void*>(j.dst), pixel % L.out_w, pixel / L.out_w);
}
