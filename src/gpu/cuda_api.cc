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

// Every function pointer of the table is in one of the two lists (so it is loaded, and
// checked against the real headers): the table is those pointers and the two paths.
#define STOKER_COUNT(member, symbol, older) +1
constexpr size_t kListed = 0 STOKER_CUDA_DRIVER_FUNCTIONS(STOKER_COUNT) STOKER_NVJPEG_FUNCTIONS(STOKER_COUNT);
#undef STOKER_COUNT
static_assert(sizeof(CudaApi) == kListed * sizeof(void (*)()) + 2 * sizeof(std::string),
              "a CudaApi member is missing from STOKER_CUDA_DRIVER_FUNCTIONS/STOKER_NVJPEG_FUNCTIONS");

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
bool Sym(void* h, const char* name, const char* older, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(::dlsym(h, name));
  if (*out == nullptr && older != nullptr) *out = reinterpret_cast<F>(::dlsym(h, older));
  if (*out == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *out != nullptr;
}

Result<CudaApi*> Load(const CudaLibraryCandidates& where) {
  auto api = std::make_unique<CudaApi>();
  std::string tried;
  void* drv = OpenFirst(where.driver, &api->driver_path, &tried);
  if (!drv) return Unimplemented("the GPU path needs the CUDA driver (libcuda); none could be loaded:{}", tried);
  std::string missing;
  // The _v2 entry points are the ones cuda.h maps the plain names to since CUDA 4 (the
  // symbols are pinned to the real headers by cuda_api_header_check.cc).
#define STOKER_LOAD(member, symbol, older) Sym(drv, symbol, older, &api->member, &missing);
  STOKER_CUDA_DRIVER_FUNCTIONS(STOKER_LOAD)
#undef STOKER_LOAD
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
#define STOKER_LOAD(member, symbol, older) Sym(nj, symbol, older, &api->member, &missing);
  STOKER_NVJPEG_FUNCTIONS(STOKER_LOAD)
#undef STOKER_LOAD
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
