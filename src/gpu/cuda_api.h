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

namespace stoker::gpu {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorOutOfMemory = 2;
constexpr CUresult kCudaErrorNotReady = 600;
constexpr unsigned kEventDisableTiming = 0x2;
constexpr unsigned kStreamNonBlocking = 0x1;

using nvjpegStatus_t = int;
using nvjpegHandle_t = struct nvjpegHandle*;
using nvjpegJpegState_t = struct nvjpegJpegState*;
using nvjpegJpegDecoder_t = struct nvjpegJpegDecoder*;
using nvjpegJpegStream_t = struct nvjpegJpegStream*;
using nvjpegDecodeParams_t = struct nvjpegDecodeParams*;
using nvjpegBufferPinned_t = struct nvjpegBufferPinned*;
using nvjpegBufferDevice_t = struct nvjpegBufferDevice*;
constexpr nvjpegStatus_t kNvjpegSuccess = 0;
enum NvjpegBackend : int { kNvjpegBackendDefault = 0, kNvjpegBackendHybrid = 1, kNvjpegBackendGpuHybrid = 2 };
constexpr int kNvjpegOutputRgbi = 5;  // NVJPEG_OUTPUT_RGBI: interleaved RGB
struct nvjpegImage_t {
  unsigned char* channel[4];
  size_t pitch[4];
};

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
  nvjpegStatus_t (*nvjpegCreateEx)(int backend, void* dev_alloc, void* pinned_alloc,
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
  nvjpegStatus_t (*nvjpegBufferPinnedCreate)(nvjpegHandle_t, void*, nvjpegBufferPinned_t*) = nullptr;
  nvjpegStatus_t (*nvjpegBufferPinnedDestroy)(nvjpegBufferPinned_t) = nullptr;
  nvjpegStatus_t (*nvjpegBufferDeviceCreate)(nvjpegHandle_t, void*, nvjpegBufferDevice_t*) = nullptr;
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
  std::vector<std::string> nvjpeg = {"libnvjpeg.so.12", "libnvjpeg.so.11", "libnvjpeg.so"};
};

// Loads both libraries and every symbol. kUnimplemented naming each library tried and why
// (not found, missing symbol, cuInit failed, no device) -- the message the pipeline shows
// when it falls back to the CPU path.
Result<const CudaApi*> LoadCudaApi(const CudaLibraryCandidates& where = {});

}  // namespace stoker::gpu
