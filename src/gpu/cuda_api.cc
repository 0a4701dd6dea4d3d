#include "gpu/cuda_api.h"

#include <dlfcn.h>

#include <mutex>

namespace stoker::gpu {

std::string CudaApi::Error(const char* call, CUresult r) const {
  const char* s = nullptr;
  if (cuGetErrorString) cuGetErrorString(r, &s);
  return fmt::format("{} failed: {} ({})", call, s ? s : "unknown CUDA error", r);
}

namespace {

void* OpenFirst(const std::vector<std::string>& names, std::string* path, std::string* tried) {
  for (const auto& n : names) {
    void* h = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
      *path = n;
      return h;
    }
    const char* e = ::dlerror();
    *tried += fmt::format("\n  {}: {}", n, e ? e : "not loadable");
  }
  return nullptr;
}

template <typename F>
bool Sym(void* h, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(::dlsym(h, name));
  if (*out == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *out != nullptr;
}

Result<CudaApi*> Load(const CudaLibraryCandidates& where) {
  auto api = std::make_unique<CudaApi>();
  std::string tried;
  void* drv = OpenFirst(where.driver, &api->driver_path, &tried);
  if (!drv) return Unimplemented("the GPU path needs the CUDA driver (libcuda); none could be loaded:{}", tried);
  std::string missing;
  // The _v2 entry points are the ones cuda.h maps the plain names to since CUDA 4.
  Sym(drv, "cuInit", &api->cuInit, &missing);
  Sym(drv, "cuDeviceGet", &api->cuDeviceGet, &missing);
  Sym(drv, "cuDeviceGetCount", &api->cuDeviceGetCount, &missing);
  Sym(drv, "cuDevicePrimaryCtxRetain", &api->cuDevicePrimaryCtxRetain, &missing);
  Sym(drv, "cuCtxSetCurrent", &api->cuCtxSetCurrent, &missing);
  Sym(drv, "cuStreamCreate", &api->cuStreamCreate, &missing);
  Sym(drv, "cuStreamDestroy_v2", &api->cuStreamDestroy, &missing);
  Sym(drv, "cuStreamWaitEvent", &api->cuStreamWaitEvent, &missing);
  Sym(drv, "cuEventCreate", &api->cuEventCreate, &missing);
  Sym(drv, "cuEventDestroy_v2", &api->cuEventDestroy, &missing);
  Sym(drv, "cuEventRecord", &api->cuEventRecord, &missing);
  Sym(drv, "cuEventQuery", &api->cuEventQuery, &missing);
  Sym(drv, "cuEventSynchronize", &api->cuEventSynchronize, &missing);
  Sym(drv, "cuEventElapsedTime", &api->cuEventElapsedTime, &missing);
  Sym(drv, "cuMemAlloc_v2", &api->cuMemAlloc, &missing);
  Sym(drv, "cuMemFree_v2", &api->cuMemFree, &missing);
  Sym(drv, "cuMemAllocHost_v2", &api->cuMemAllocHost, &missing);
  Sym(drv, "cuMemFreeHost", &api->cuMemFreeHost, &missing);
  Sym(drv, "cuMemcpyHtoDAsync_v2", &api->cuMemcpyHtoDAsync, &missing);
  Sym(drv, "cuMemGetInfo_v2", &api->cuMemGetInfo, &missing);
  Sym(drv, "cuModuleLoadData", &api->cuModuleLoadData, &missing);
  Sym(drv, "cuModuleGetFunction", &api->cuModuleGetFunction, &missing);
  Sym(drv, "cuLaunchKernel", &api->cuLaunchKernel, &missing);
  Sym(drv, "cuGetErrorString", &api->cuGetErrorString, &missing);
  if (!missing.empty())
    return Unimplemented("the CUDA driver {} lacks {} (driver too old?)", api->driver_path, missing);
  if (CUresult r = api->cuInit(0); r != kCudaSuccess)
    return Unimplemented("CUDA driver {}: {} (no usable GPU or a driver/kernel-module mismatch)",
                         api->driver_path, api->Error("cuInit", r));
  int n = 0;
  if (CUresult r = api->cuDeviceGetCount(&n); r != kCudaSuccess || n == 0)
    return Unimplemented("CUDA driver {}: no CUDA device visible", api->driver_path);

  void* nj = OpenFirst(where.nvjpeg, &api->nvjpeg_path, &tried);
  if (!nj)
    return Unimplemented("the GPU path needs nvJPEG (CUDA toolkit or the nvidia-nvjpeg wheel); "
                         "none could be loaded:{}", tried);
  Sym(nj, "nvjpegCreateEx", &api->nvjpegCreateEx, &missing);
  Sym(nj, "nvjpegDestroy", &api->nvjpegDestroy, &missing);
  Sym(nj, "nvjpegDecoderCreate", &api->nvjpegDecoderCreate, &missing);
  Sym(nj, "nvjpegDecoderDestroy", &api->nvjpegDecoderDestroy, &missing);
  Sym(nj, "nvjpegDecoderStateCreate", &api->nvjpegDecoderStateCreate, &missing);
  Sym(nj, "nvjpegJpegStateDestroy", &api->nvjpegJpegStateDestroy, &missing);
  Sym(nj, "nvjpegJpegStreamCreate", &api->nvjpegJpegStreamCreate, &missing);
  Sym(nj, "nvjpegJpegStreamDestroy", &api->nvjpegJpegStreamDestroy, &missing);
  Sym(nj, "nvjpegJpegStreamParse", &api->nvjpegJpegStreamParse, &missing);
  Sym(nj, "nvjpegDecodeParamsCreate", &api->nvjpegDecodeParamsCreate, &missing);
  Sym(nj, "nvjpegDecodeParamsDestroy", &api->nvjpegDecodeParamsDestroy, &missing);
  Sym(nj, "nvjpegDecodeParamsSetOutputFormat", &api->nvjpegDecodeParamsSetOutputFormat, &missing);
  Sym(nj, "nvjpegBufferPinnedCreate", &api->nvjpegBufferPinnedCreate, &missing);
  Sym(nj, "nvjpegBufferPinnedDestroy", &api->nvjpegBufferPinnedDestroy, &missing);
  Sym(nj, "nvjpegBufferDeviceCreate", &api->nvjpegBufferDeviceCreate, &missing);
  Sym(nj, "nvjpegBufferDeviceDestroy", &api->nvjpegBufferDeviceDestroy, &missing);
  Sym(nj, "nvjpegStateAttachPinnedBuffer", &api->nvjpegStateAttachPinnedBuffer, &missing);
  Sym(nj, "nvjpegStateAttachDeviceBuffer", &api->nvjpegStateAttachDeviceBuffer, &missing);
  Sym(nj, "nvjpegDecodeJpegHost", &api->nvjpegDecodeJpegHost, &missing);
  Sym(nj, "nvjpegDecodeJpegTransferToDevice", &api->nvjpegDecodeJpegTransferToDevice, &missing);
  Sym(nj, "nvjpegDecodeJpegDevice", &api->nvjpegDecodeJpegDevice, &missing);
  if (!missing.empty())
    return Unimplemented("nvJPEG {} lacks {} (nvJPEG from CUDA 11 or newer is needed)",
                         api->nvjpeg_path, missing);
  return api.release();  // process-wide, never unloaded
}

std::mutex g_mu;
CudaApi* g_api = nullptr;

}  // namespace

Result<const CudaApi*> LoadCudaApi(const CudaLibraryCandidates& where) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_api) return static_cast<const CudaApi*>(g_api);
  auto r = Load(where);
  if (!r.ok()) return r.status();
  g_api = *r;
  return static_cast<const CudaApi*>(g_api);
}

}  // namespace stoker::gpu
