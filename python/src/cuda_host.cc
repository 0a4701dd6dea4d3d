#include "cuda_host.h"

#include <dlfcn.h>

#include <mutex>

namespace stoker::py {
namespace {

using cudaError_t = int;
constexpr unsigned kCudaHostAllocPortable = 1;  // pinned for every CUDA context

struct CudaRuntime {
  void* handle = nullptr;
  std::string path;
  cudaError_t (*host_alloc)(void**, size_t, unsigned) = nullptr;
  cudaError_t (*free_host)(void*) = nullptr;
  cudaError_t (*device_count)(int*) = nullptr;
  const char* (*error_string)(cudaError_t) = nullptr;
};

class PinnedAllocator final : public HostAllocator {
 public:
  explicit PinnedAllocator(const CudaRuntime* rt) : rt_(rt) {}
  void* Allocate(size_t bytes) override {
    void* p = nullptr;
    if (rt_->host_alloc(&p, bytes == 0 ? 1 : bytes, kCudaHostAllocPortable) != 0) return nullptr;
    return p;
  }
  void Free(void* p, size_t) override {
    if (p) rt_->free_host(p);
  }
  std::string name() const override { return "cuda-pinned"; }
  bool pinned() const override { return true; }

 private:
  const CudaRuntime* rt_;
};

std::mutex g_mu;
std::vector<std::string> g_candidates = {"libcudart.so.13", "libcudart.so.12", "libcudart.so",
                                          "libcudart.so.11.0"};
CudaRuntime* g_runtime = nullptr;        // leaked on purpose
PinnedAllocator* g_allocator = nullptr;  // leaked on purpose

Result<CudaRuntime*> Load() {
  std::string tried;
  for (const auto& name : g_candidates) {
    void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* err = ::dlerror();
      tried += fmt::format("\n  {}: {}", name, err ? err : "not loadable");
      continue;
    }
    auto* rt = new CudaRuntime;
    rt->handle = h;
    rt->path = name;
    rt->host_alloc = reinterpret_cast<decltype(rt->host_alloc)>(::dlsym(h, "cudaHostAlloc"));
    rt->free_host = reinterpret_cast<decltype(rt->free_host)>(::dlsym(h, "cudaFreeHost"));
    rt->device_count = reinterpret_cast<decltype(rt->device_count)>(::dlsym(h, "cudaGetDeviceCount"));
    rt->error_string = reinterpret_cast<decltype(rt->error_string)>(::dlsym(h, "cudaGetErrorString"));
    if (!rt->host_alloc || !rt->free_host || !rt->device_count) {
      tried += fmt::format("\n  {}: missing cudaHostAlloc/cudaFreeHost/cudaGetDeviceCount", name);
      ::dlclose(h);
      delete rt;
      continue;
    }
    int n = 0;
    cudaError_t e = rt->device_count(&n);
    if (e != 0 || n == 0) {
      std::string why = e != 0 && rt->error_string ? rt->error_string(e) : "no CUDA device";
      return Unimplemented("pinned memory: CUDA runtime {} loaded but unusable: {}", name, why);
    }
    return rt;
  }
  return Unimplemented("pinned memory needs the CUDA runtime; none could be loaded:{}", tried);
}

}  // namespace

void SetCudaRuntimeCandidates(std::vector<std::string> candidates) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_candidates = std::move(candidates);
}

Result<HostAllocator*> CudaPinnedAllocator() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_allocator == nullptr) {
    STOKER_ASSIGN_OR_RETURN(g_runtime, Load());
    g_allocator = new PinnedAllocator(g_runtime);
  }
  return static_cast<HostAllocator*>(g_allocator);
}

std::string CudaRuntimePath() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_runtime ? g_runtime->path : "";
}

}  // namespace stoker::py
