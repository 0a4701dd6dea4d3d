// Test seam: a CudaApi table whose "device" is the host. Device memory is malloc'd host
// memory (a CUdeviceptr is its address), streams run every operation at once, the kernel
// "launch" runs RunResizeJobsOnHost, and nvJPEG's decode is libjpeg-turbo's full-size
// decode. Every call that orders work is logged ("record e3 s1", "wait s2 e3", "sync e3",
// "launch s1", "copy s1", "nvjpeg-host", "nvjpeg-device s1") so tests can check the
// stream/event protocol. Scripted failures: reject_bytes (images nvJPEG refuses),
// fail_alloc_above (cuMemAlloc of more bytes fails with out-of-memory).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codec/image.h"
#include "gpu/cuda_api.h"
#include "gpu/resize_kernel.h"

namespace stoker::gpu::testing {

class FakeCuda {
 public:
  FakeCuda() {
    current() = this;
    CudaApi& a = api_;
    a.cuInit = [](unsigned) { return 0; };
    a.cuDeviceGet = [](CUdevice* d, int i) { *d = i; return 0; };
    a.cuDeviceGetCount = [](int* n) { *n = 1; return 0; };
    a.cuDevicePrimaryCtxRetain = [](CUcontext* c, CUdevice) { *c = reinterpret_cast<CUcontext>(0x1); return 0; };
    a.cuCtxSetCurrent = [](CUcontext) { return 0; };
    a.cuStreamCreate = [](CUstream* s, unsigned) { *s = F().NewHandle<CUstream>(); F().Log("stream-create"); return 0; };
    a.cuStreamDestroy = [](CUstream) { return 0; };
    a.cuStreamWaitEvent = [](CUstream s, CUevent e, unsigned) {
      F().Log(fmt::format("wait s{} e{}", Id(s), Id(e)));
      return 0;
    };
    a.cuEventCreate = [](CUevent* e, unsigned) { *e = F().NewHandle<CUevent>(); return 0; };
    a.cuEventDestroy = [](CUevent) { return 0; };
    a.cuEventRecord = [](CUevent e, CUstream s) {
      F().recorded_on[Id(e)] = Id(s);
      F().Log(fmt::format("record e{} s{}", Id(e), Id(s)));
      return 0;
    };
    a.cuEventQuery = [](CUevent) { return 0; };
    a.cuEventSynchronize = [](CUevent e) { F().Log(fmt::format("sync e{}", Id(e))); return 0; };
    a.cuEventElapsedTime = [](float* ms, CUevent, CUevent) { *ms = 1.0f; return 0; };
    a.cuMemAlloc = [](CUdeviceptr* p, size_t n) {
      if (F().fail_alloc_above > 0 && n > F().fail_alloc_above) return kCudaErrorOutOfMemory;
      void* m = std::calloc(1, n);
      F().live[reinterpret_cast<uintptr_t>(m)] = n;
      *p = reinterpret_cast<uintptr_t>(m);
      return 0;
    };
    a.cuMemFree = [](CUdeviceptr p) {
      F().live.erase(p);
      std::free(reinterpret_cast<void*>(static_cast<uintptr_t>(p)));
      return 0;
    };
    a.cuMemAllocHost = [](void** p, size_t n) { *p = std::calloc(1, n); return 0; };
    a.cuMemFreeHost = [](void* p) { std::free(p); return 0; };
    a.cuMemcpyHtoDAsync = [](CUdeviceptr d, const void* s, size_t n, CUstream st) {
      std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(d)), s, n);
      F().Log(fmt::format("copy s{}", Id(st)));
      return 0;
    };
    a.cuMemGetInfo = [](size_t* f, size_t* t) { *f = *t = size_t{1} << 34; return 0; };
    a.cuModuleLoadData = [](CUmodule* m, const void*) { *m = reinterpret_cast<CUmodule>(0x2); return 0; };
    a.cuModuleGetFunction = [](CUfunction* f, CUmodule, const char* name) {
      F().kernel_name = name;
      *f = reinterpret_cast<CUfunction>(0x3);
      return 0;
    };
    a.cuLaunchKernel = [](CUfunction, unsigned gx, unsigned gy, unsigned, unsigned bx, unsigned,
                          unsigned, unsigned, CUstream s, void** args, void**) {
      const CUdeviceptr jobs = *static_cast<CUdeviceptr*>(args[0]);
      const ResizeLaunch& L = *static_cast<ResizeLaunch*>(args[1]);
      F().launches.push_back({gx, gy, bx, L.num_jobs});
      RunResizeJobsOnHost(reinterpret_cast<const ResizeJob*>(static_cast<uintptr_t>(jobs)), L);
      F().Log(fmt::format("launch s{}", Id(s)));
      return 0;
    };
    a.cuGetErrorString = [](CUresult r, const char** s) {
      *s = r == kCudaErrorOutOfMemory ? "out of memory" : "fake error";
      return 0;
    };
    a.nvjpegCreateEx = [](int, NvjpegDevAllocator*, NvjpegPinnedAllocator*, unsigned, nvjpegHandle_t* h) {
      *h = reinterpret_cast<nvjpegHandle_t>(0x10);
      return 0;
    };
    a.nvjpegDestroy = [](nvjpegHandle_t) { return 0; };
    a.nvjpegDecoderCreate = [](nvjpegHandle_t, int backend, nvjpegJpegDecoder_t* d) {
      if (backend == kNvjpegBackendGpuHybrid && !F().gpu_hybrid_available) return 9;
      *d = reinterpret_cast<nvjpegJpegDecoder_t>(static_cast<uintptr_t>(0x100 + backend));
      return 0;
    };
    a.nvjpegDecoderDestroy = [](nvjpegJpegDecoder_t) { return 0; };
    a.nvjpegDecoderStateCreate = [](nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t* s) {
      *s = reinterpret_cast<nvjpegJpegState_t>(F().NewState());
      return 0;
    };
    a.nvjpegJpegStateDestroy = [](nvjpegJpegState_t) { return 0; };
    a.nvjpegJpegStreamCreate = [](nvjpegHandle_t, nvjpegJpegStream_t* s) {
      *s = reinterpret_cast<nvjpegJpegStream_t>(F().NewState());
      return 0;
    };
    a.nvjpegJpegStreamDestroy = [](nvjpegJpegStream_t) { return 0; };
    a.nvjpegJpegStreamParse = [](nvjpegHandle_t, const unsigned char* d, size_t n, int, int,
                                 nvjpegJpegStream_t s) {
      auto& st = F().states[reinterpret_cast<uintptr_t>(s)];
      st.data.assign(d, d + n);
      return 0;
    };
    a.nvjpegDecodeParamsCreate = [](nvjpegHandle_t, nvjpegDecodeParams_t* p) {
      *p = reinterpret_cast<nvjpegDecodeParams_t>(0x20);
      return 0;
    };
    a.nvjpegDecodeParamsDestroy = [](nvjpegDecodeParams_t) { return 0; };
    a.nvjpegDecodeParamsSetOutputFormat = [](nvjpegDecodeParams_t, int f) {
      return f == kNvjpegOutputRgbi ? 0 : 2;
    };
    a.nvjpegBufferPinnedCreate = [](nvjpegHandle_t, NvjpegPinnedAllocator*, nvjpegBufferPinned_t* b) {
      *b = reinterpret_cast<nvjpegBufferPinned_t>(0x30);
      return 0;
    };
    a.nvjpegBufferPinnedDestroy = [](nvjpegBufferPinned_t) { return 0; };
    a.nvjpegBufferDeviceCreate = [](nvjpegHandle_t, NvjpegDevAllocator*, nvjpegBufferDevice_t* b) {
      *b = reinterpret_cast<nvjpegBufferDevice_t>(0x40);
      return 0;
    };
    a.nvjpegBufferDeviceDestroy = [](nvjpegBufferDevice_t) { return 0; };
    a.nvjpegStateAttachPinnedBuffer = [](nvjpegJpegState_t, nvjpegBufferPinned_t) { return 0; };
    a.nvjpegStateAttachDeviceBuffer = [](nvjpegJpegState_t, nvjpegBufferDevice_t) { return 0; };
    a.nvjpegDecodeJpegHost = [](nvjpegHandle_t, nvjpegJpegDecoder_t dec, nvjpegJpegState_t state,
                                nvjpegDecodeParams_t, nvjpegJpegStream_t js) {
      auto& src = F().states[reinterpret_cast<uintptr_t>(js)];
      auto& st = F().states[reinterpret_cast<uintptr_t>(state)];
      F().submitted.push_back(src.data);
      F().Log(fmt::format("nvjpeg-host b{}", reinterpret_cast<uintptr_t>(dec) - 0x100));
      for (const auto& r : F().reject_bytes)
        if (src.data.size() == r.size() && std::memcmp(src.data.data(), r.data(), r.size()) == 0)
          return 4;  // NVJPEG_STATUS_JPEG_NOT_SUPPORTED
      DecodeRequest req;
      req.allow_dct_scale = false;
      req.allow_region_decode = false;
      if (!DecodeImage(src.data.data(), src.data.size(), req, &st.img).ok()) return 3;  // BAD_JPEG
      return 0;
    };
    a.nvjpegDecodeJpegTransferToDevice = [](nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t,
                                            nvjpegJpegStream_t, CUstream) { return 0; };
    a.nvjpegDecodeJpegDevice = [](nvjpegHandle_t, nvjpegJpegDecoder_t, nvjpegJpegState_t state,
                                  nvjpegImage_t* dst, CUstream s) {
      auto& st = F().states[reinterpret_cast<uintptr_t>(state)];
      for (int y = 0; y < st.img.height; ++y)
        std::memcpy(dst->channel[0] + y * dst->pitch[0], st.img.pixels.data() + y * st.img.width * 3,
                    static_cast<size_t>(st.img.width) * 3);
      F().Log(fmt::format("nvjpeg-device s{}", Id(s)));
      return 0;
    };
  }
  ~FakeCuda() {
    for (auto& [p, n] : live) std::free(reinterpret_cast<void*>(p));
    current() = nullptr;
  }
  FakeCuda(const FakeCuda&) = delete;
  FakeCuda& operator=(const FakeCuda&) = delete;

  const CudaApi* api() const { return &api_; }
  static uintptr_t Id(const void* h) { return reinterpret_cast<uintptr_t>(h); }

  struct Launch {
    unsigned gx, gy, bx;
    int jobs;
  };
  std::vector<std::string> log;
  std::map<uintptr_t, uintptr_t> recorded_on;  // event -> stream of its last record
  std::vector<Launch> launches;
  std::vector<std::vector<uint8_t>> submitted;  // bytes handed to nvJPEG's host phase
  std::vector<std::vector<uint8_t>> reject_bytes;
  size_t fail_alloc_above = 0;
  bool gpu_hybrid_available = true;
  std::string kernel_name;
  std::map<uintptr_t, size_t> live;

  // A stream handle the test can pass as the consumer's stream.
  CUstream NewStream() { return NewHandle<CUstream>(); }

 private:
  struct State {
    std::vector<uint8_t> data;
    DecodedImage img;
  };
  static FakeCuda*& current() {
    static FakeCuda* f = nullptr;
    return f;
  }
  static FakeCuda& F() { return *current(); }
  template <typename T>
  T NewHandle() {
    return reinterpret_cast<T>(static_cast<uintptr_t>(++next_handle_));
  }
  uintptr_t NewState() {
    const uintptr_t id = 0x100000 + (++next_handle_);
    states[id];
    return id;
  }
  void Log(std::string s) { log.push_back(std::move(s)); }

  CudaApi api_;
  uintptr_t next_handle_ = 0;
  std::map<uintptr_t, State> states;
};

}  // namespace stoker::gpu::testing
