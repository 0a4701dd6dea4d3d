// The CUDA driver API and nvJPEG functions the GPU path uses, as one table of function
// pointers filled at run time with dlopen (libcuda.so.1 comes with the driver; libnvjpeg
// from the CUDA toolkit or the nvidia-nvjpeg wheels). Nothing here links CUDA, so the CPU
// build and CI are unchanged. The table is the seam: the tests fill it with a recording
// fake (gpu/fake_cuda.h) that runs the kernel on the host.
//
// Types are declared here with the ABI of cuda.h and nvjpeg.h (opaque handles are
// pointers, CUdeviceptr is 64-bit, enums are int).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

// The opaque handle tags, at global scope with cuda.h's and nvjpeg.h's own names, so that a
// handle type here is the very type the real headers declare (cuda_api_header_check.cc
// compares the whole table against them).
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;
struct CUmod_st;
struct CUfunc_st;
struct nvjpegHandle;
struct nvjpegJpegState;
struct nvjpegJpegDecoder;
struct nvjpegJpegStream;
struct nvjpegDecodeParams;
struct nvjpegBufferPinned;
struct nvjpegBufferDevice;

namespace stoker::gpu {

// Enums of the real headers are ints here (same size and calling convention); the header
// check pins every value below to the real enumerator.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = ::CUctx_st*;
using CUstream = ::CUstream_st*;
using CUevent = ::CUevent_st*;
using CUmodule = ::CUmod_st*;
using CUfunction = ::CUfunc_st*;
constexpr CUresult kCudaSuccess = 0;             // CUDA_SUCCESS
constexpr CUresult kCudaErrorOutOfMemory = 2;    // CUDA_ERROR_OUT_OF_MEMORY
constexpr CUresult kCudaErrorNotReady = 600;     // CUDA_ERROR_NOT_READY
constexpr unsigned kEventDisableTiming = 0x2;    // CU_EVENT_DISABLE_TIMING
constexpr unsigned kStreamNonBlocking = 0x1;     // CU_STREAM_NON_BLOCKING

using nvjpegStatus_t = int;
using nvjpegHandle_t = ::nvjpegHandle*;
using nvjpegJpegState_t = ::nvjpegJpegState*;
using nvjpegJpegDecoder_t = ::nvjpegJpegDecoder*;
using nvjpegJpegStream_t = ::nvjpegJpegStream*;
using nvjpegDecodeParams_t = ::nvjpegDecodeParams*;
using nvjpegBufferPinned_t = ::nvjpegBufferPinned*;
using nvjpegBufferDevice_t = ::nvjpegBufferDevice*;
constexpr nvjpegStatus_t kNvjpegSuccess = 0;     // NVJPEG_STATUS_SUCCESS
enum NvjpegBackend : int { kNvjpegBackendDefault = 0, kNvjpegBackendHybrid = 1, kNvjpegBackendGpuHybrid = 2 };
constexpr int kNvjpegOutputRgbi = 5;  // NVJPEG_OUTPUT_RGBI: interleaved RGB
// nvjpegImage_t, nvjpegDevAllocator_t, nvjpegPinnedAllocator_t: the same layout (checked).
struct nvjpegImage_t {
  unsigned char* channel[4];
  size_t pitch[4];
};
struct NvjpegDevAllocator {
  int (*dev_malloc)(void**, size_t);
  int (*dev_free)(void*);
};
struct NvjpegPinnedAllocator {
  int (*pinned_malloc)(void**, size_t, unsigned);
  int (*pinned_free)(void*);
};

// The table as X-macro lists: X(member, "exported symbol", "older symbol" or nullptr).
// cuda_api.cc loads the symbol, else the older one (a driver from before the symbol);
// cuda_api_header_check.cc checks each against the real headers: the member's type against
// the declaration's, and that the name cuda.h maps the plain name to (cuMemAlloc ->
// cuMemAlloc_v2) is one of the two. CUDA 13's cuda.h maps cuEventElapsedTime to
// cuEventElapsedTime_v2 (drivers from 12.8 on export both, same signature); 12.x maps it
// to the plain name. A member added to CudaApi but not here is caught by a size check in
// cuda_api.cc.
#define STOKER_CUDA_DRIVER_FUNCTIONS(X)                       \
  X(cuInit, "cuInit", nullptr)                                         \
  X(cuDeviceGet, "cuDeviceGet", nullptr)                               \
  X(cuDeviceGetCount, "cuDeviceGetCount", nullptr)                     \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", nullptr)     \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", nullptr)                       \
  X(cuStreamCreate, "cuStreamCreate", nullptr)                         \
  X(cuStreamDestroy, "cuStreamDestroy_v2", nullptr)                    \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", nullptr)                   \
  X(cuEventCreate, "cuEventCreate", nullptr)                           \
  X(cuEventDestroy, "cuEventDestroy_v2", nullptr)                      \
  X(cuEventRecord, "cuEventRecord", nullptr)                           \
  X(cuEventQuery, "cuEventQuery", nullptr)                             \
  X(cuEventSynchronize, "cuEventSynchronize", nullptr)                 \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime")                 \
  X(cuMemAlloc, "cuMemAlloc_v2", nullptr)                              \
  X(cuMemFree, "cuMemFree_v2", nullptr)                                \
  X(cuMemAllocHost, "cuMemAllocHost_v2", nullptr)                      \
  X(cuMemFreeHost, "cuMemFreeHost", nullptr)                           \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", nullptr)                \
  X(cuMemGetInfo, "cuMemGetInfo_v2", nullptr)                          \
  X(cuModuleLoadData, "cuModuleLoadData", nullptr)                     \
  X(cuModuleGetFunction, "cuModuleGetFunction", nullptr)               \
  X(cuLaunchKernel, "cuLaunchKernel", nullptr)                         \
  X(cuGetErrorString, "cuGetErrorString", nullptr)

#define STOKER_NVJPEG_FUNCTIONS(X)                                          \
  X(nvjpegCreateEx, "nvjpegCreateEx", nullptr)                                       \
  X(nvjpegDestroy, "nvjpegDestroy", nullptr)                                         \
  X(nvjpegDecoderCreate, "nvjpegDecoderCreate", nullptr)                             \
  X(nvjpegDecoderDestroy, "nvjpegDecoderDestroy", nullptr)                           \
  X(nvjpegDecoderStateCreate, "nvjpegDecoderStateCreate", nullptr)                   \
  X(nvjpegJpegStateDestroy, "nvjpegJpegStateDestroy", nullptr)                       \
  X(nvjpegJpegStreamCreate, "nvjpegJpegStreamCreate", nullptr)                       \
  X(nvjpegJpegStreamDestroy, "nvjpegJpegStreamDestroy", nullptr)                     \
  X(nvjpegJpegStreamParse, "nvjpegJpegStreamParse", nullptr)                         \
  X(nvjpegDecodeParamsCreate, "nvjpegDecodeParamsCreate", nullptr)                   \
  X(nvjpegDecodeParamsDestroy, "nvjpegDecodeParamsDestroy", nullptr)                 \
  X(nvjpegDecodeParamsSetOutputFormat, "nvjpegDecodeParamsSetOutputFormat", nullptr) \
  X(nvjpegBufferPinnedCreate, "nvjpegBufferPinnedCreate", nullptr)                   \
  X(nvjpegBufferPinnedDestroy, "nvjpegBufferPinnedDestroy", nullptr)                 \
  X(nvjpegBufferDeviceCreate, "nvjpegBufferDeviceCreate", nullptr)                   \
  X(nvjpegBufferDeviceDestroy, "nvjpegBufferDeviceDestroy", nullptr)                 \
  X(nvjpegStateAttachPinnedBuffer, "nvjpegStateAttachPinnedBuffer", nullptr)         \
  X(nvjpegStateAttachDeviceBuffer, "nvjpegStateAttachDeviceBuffer", nullptr)         \
  X(nvjpegDecodeJpegHost, "nvjpegDecodeJpegHost", nullptr)                           \
  X(nvjpegDecodeJpegTransferToDevice, "nvjpegDecodeJpegTransferToDevice", nullptr)   \
  X(nvjpegDecodeJpegDevice, "nvjpegDecodeJpegDevice", nullptr)

struct CudaApi {
  // --- driver API (libcuda.so.1)
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventQuery)(CUevent) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemAllocHost)(void**, size_t) = nullptr;
  CUresult (*cuMemFreeHost)(void*) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*cuMemGetInfo)(size_t*, size_t*) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;

  // --- nvJPEG (libnvjpeg.so.*), the decoupled API (per-image host and device phases)
  nvjpegStatus_t (*nvjpegCreateEx)(int backend, NvjpegDevAllocator* dev_alloc,
                                   NvjpegPinnedAllocator* pinned_alloc,
                                   unsigned flags, nvjpegHandle_t*) = nullptr;
  nvjpegStatus_t (*nvjpegDestroy)(nvjpegHandle_t) = nullptr;
  nvjpegStatus_t (*nvjpegDecoderCreate)(nvjpegHandle_t, int backend, nvjpegJpegDecoder_t*) = nullptr;
  nvjpegStatus_t (*nvjpegDecoderDestroy)(nvjpegJpegDecoder_t) = nullptr;
  nvjpegStatus_t (*nvjpegDecoderStateCreate)(nvjpegHandle_t, nvjpegJpegDecoder_t,
                                             nvjpegJpegState_t*) = nullptr;
  nvjpegStatus_t (*nvjpegJpegStateDestroy)(nvjpegJpegState_t) = nullptr;
  nvjpegStatus_t (*nvjpegJpegStreamCreate)(nvjpegHandle_t, nvjpegJpegStream_t*) = nullptr;
  nvjpegStatus_t (*nvjpegJpegStreamDestroy)(nvjpegJpegStream_t) = nullptr;
  nvjpegStatus_t (*nvjpegJpegStreamParse)(nvjpegHandle_t, const unsigned char*, size_t, int,
                                          int, nvjpegJpegStream_t) = nullptr;
  nvjpegStatus_t (*nvjpegDecodeParamsCreate)(nvjpegHandle_t, nvjpegDecodeParams_t*) = nullptr;
  nvjpegStatus_t (*nvjpegDecodeParamsDestroy)(nvjpegDecodeParams_t) = nullptr;
  nvjpegStatus_t (*nvjpegDecodeParamsSetOutputFormat)(nvjpegDecodeParams_t, int) = nullptr;
  nvjpegStatus_t (*nvjpegBufferPinnedCreate)(nvjpegHandle_t, NvjpegPinnedAllocator*,
                                           nvjpegBufferPinned_t*) = nullptr;
  nvjpegStatus_t (*nvjpegBufferPinnedDestroy)(nvjpegBufferPinned_t) = nullptr;
  nvjpegStatus_t (*nvjpegBufferDeviceCreate)(nvjpegHandle_t, NvjpegDevAllocator*,
                                           nvjpegBufferDevice_t*) = nullptr;
  nvjpegStatus_t (*nvjpegBufferDeviceDestroy)(nvjpegBufferDevice_t) = nullptr;
  nvjpegStatus_t (*nvjpegStateAttachPinnedBuffer)(nvjpegJpegState_t, nvjpegBufferPinned_t) = nullptr;
  nvjpegStatus_t (*nvjpegStateAttachDeviceBuffer)(nvjpegJpegState_t, nvjpegBufferDevice_t) = nullptr;
  nvjpegStatus_t (*nvjpegDecodeJpegHost)(nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t,
                                         nvjpegDecodeParams_t, nvjpegJpegStream_t) = nullptr;
  nvjpegStatus_t (*nvjpegDecodeJpegTransferToDevice)(nvjpegHandle_t, nvjpegJpegDecoder_t,
                                                     nvjpegJpegState_t, nvjpegJpegStream_t,
                                                     CUstream) = nullptr;
  nvjpegStatus_t (*nvjpegDecodeJpegDevice)(nvjpegHandle_t, nvjpegJpegDecoder_t,
                                           nvjpegJpegState_t, nvjpegImage_t*, CUstream) = nullptr;

  std::string driver_path, nvjpeg_path;  // what was loaded (empty in fakes)

  // "cuMemAlloc failed: out of memory (2)": the call and the driver's words.
  std::string Error(const char* call, CUresult r) const;
};

// Where to look: names or paths tried in order (the Python layer puts the nvidia-nvjpeg
// wheel's and torch's own library folders first).
struct CudaLibraryCandidates {
  std::vector<std::string> driver = {"libcuda.so.1", "libcuda.so"};
  // CUDA 13 first (its toolkit and wheels ship libnvjpeg.so.13), then 12, 11; the
  // toolkit's folder by path too (often not in the loader's cache).
  std::vector<std::string> nvjpeg = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11",
                                     "libnvjpeg.so", "/usr/local/cuda/lib64/libnvjpeg.so.13",
                                     "/usr/local/cuda/lib64/libnvjpeg.so.12"};
};

// Loads both libraries and every symbol. kUnimplemented naming each library tried and why
// (not found, missing symbol, cuInit failed, no device) -- the message the pipeline shows
// when it falls back to the CPU path.
Result<const CudaApi*> LoadCudaApi(const CudaLibraryCandidates& where = {});

}  // namespace stoker::gpu
