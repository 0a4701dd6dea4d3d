// _stoker.DevicePipeline: batches in device memory from the GPU path (or the CPU path plus
// an upload, as gpu_decode decides), handed to PyTorch as kDLCUDA DLPack capsules. next()
// takes the consumer's CUDA stream (torch.cuda.current_stream().cuda_stream): that stream
// waits on the batch's event (no host sync), and when the tensor is freed the slot is
// reused only after the work that stream had queued by then.
#include "device.h"

#include <cstdint>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "batch.h"
#include "errors.h"
#include "gpu/device_pipeline.h"
#include "options.h"

namespace pyb = pybind11;
using namespace pybind11::literals;

namespace stoker::py {
namespace {

class PyDevicePipeline {
 public:
  PyDevicePipeline(const pyb::dict& options, int device, std::vector<std::string> nvjpeg) {
    PyPipelineOptions po = OptionsFromDict(options);
    po.opts.device = ComputeDevice::kCuda;
    gpu::CudaLibraryCandidates where;
    if (!nvjpeg.empty()) where.nvjpeg = std::move(nvjpeg);
    gpu::DevicePipelineConfig cfg;
    cfg.stage.device = device;
    pyb::gil_scoped_release nogil;
    const gpu::CudaApi* api = ValueOrThrow(gpu::LoadCudaApi(where));
    p_ = std::shared_ptr<gpu::DevicePipeline>(ValueOrThrow(gpu::DevicePipeline::Create(po.opts, api, cfg)));
    device_ = device;
  }
  ~PyDevicePipeline() {
    if (p_) {
      pyb::gil_scoped_release nogil;
      p_->Stop();
    }
  }
  void StartEpoch(int epoch, uint64_t start_batch) {
    pyb::gil_scoped_release nogil;
    ThrowIfError(p_->StartEpoch(epoch, start_batch));
  }
  void ResumeEpoch(int epoch, uint64_t consumed) {
    pyb::gil_scoped_release nogil;
    ThrowIfError(p_->ResumeEpoch(epoch, consumed));
  }
  // {"image": kDLCUDA capsule, "label": int64 array, "index": int64 array} or None.
  pyb::object Next(uintptr_t consumer_stream) {
    gpu::DeviceBatchPtr b;
    Status st;
    {
      pyb::gil_scoped_release nogil;
      auto r = p_->Next();
      if (r.ok()) {
        b = *r;
        st = p_->HandOver(b.get(), reinterpret_cast<gpu::CUstream>(consumer_stream));
      } else {
        st = r.status();
      }
    }
    if (!st.ok()) {
      if (IsEndOfStream(st)) return pyb::none();
      ThrowIfError(st);
    }
    pyb::dict d;
    const int64_t n = b->size;
    std::vector<int64_t> shape = b->layout == OutputLayout::kFloatCHW
                                     ? std::vector<int64_t>{n, 3, b->height, b->width}
                                     : std::vector<int64_t>{n, b->height, b->width, 3};
    DLDataType dt = b->layout == OutputLayout::kFloatCHW ? DLDataType{kDLFloat, 32, 1}
                                                         : DLDataType{kDLUInt, 8, 1};
    static const uint8_t kOne = 0;
    const void* data = b->images ? reinterpret_cast<const void*>(static_cast<uintptr_t>(b->images)) : &kOne;
    d["image"] = DlpackCapsule(b, data, dt, shape, DLDevice{kDLCUDA, b->device});
    pyb::array_t<int64_t> labels(n), index(n);
    for (int64_t i = 0; i < n; ++i) {
      labels.mutable_at(i) = b->labels[i];
      index.mutable_at(i) = static_cast<int64_t>(b->sample_indices[i]);
    }
    d["label"] = labels;
    d["index"] = index;
    d["_epoch"] = b->epoch;
    d["_batch"] = b->index;
    d["_cpu_fallbacks"] = b->cpu_fallbacks;
    return d;
  }
  pyb::dict Stats() const {
    const gpu::DeviceStageStats& s = p_->stage_stats();
    pyb::dict d;
    d["gpu_decoding"] = p_->gpu_decoding();
    d["decision"] = gpu::OffloadVerdictName(p_->decision().verdict);
    d["reason"] = p_->decision().reason;
    d["batches"] = s.batches;
    d["images"] = s.images;
    d["gpu_host_huffman"] = s.gpu_host_huffman;
    d["gpu_device_huffman"] = s.gpu_device_huffman;
    d["cpu_fallback"] = s.cpu;
    pyb::dict fb;
    for (size_t i = 1; i < static_cast<size_t>(gpu::FallbackReason::kCount); ++i) {
      const auto r = static_cast<gpu::FallbackReason>(i);
      if (s.fallbacks[r]) fb[gpu::FallbackReasonName(r)] = s.fallbacks[r];
    }
    d["fallbacks"] = fb;
    d["skipped"] = s.skipped;
    d["host_s_per_image"] = s.images ? s.host_seconds / s.images : 0.0;
    d["gpu_ms_per_batch"] = s.gpu_ms_batches ? s.gpu_ms / s.gpu_ms_batches : 0.0;
    d["gpu_s_per_image"] = s.images && s.gpu_ms_batches ? s.gpu_ms * 1e-3 / s.images : 0.0;
    return d;
  }
  uint64_t batches_per_epoch() const { return p_->engine().batches_per_epoch(); }
  uint64_t pass_batches() const { return p_->engine().pass_batches(); }

 private:
  std::shared_ptr<gpu::DevicePipeline> p_;
  int device_ = 0;
};

}  // namespace

void RegisterDevicePipeline(pyb::module_& m) {
  pyb::class_<PyDevicePipeline>(m, "DevicePipeline")
      .def(pyb::init<const pyb::dict&, int, std::vector<std::string>>(), "options"_a,
           "device"_a = 0, "nvjpeg"_a = std::vector<std::string>{})
      .def("start_epoch", &PyDevicePipeline::StartEpoch, "epoch"_a, "start_batch"_a = 0)
      .def("resume_epoch", &PyDevicePipeline::ResumeEpoch, "epoch"_a, "consumed"_a)
      .def("next", &PyDevicePipeline::Next, "consumer_stream"_a)
      .def("stats", &PyDevicePipeline::Stats)
      .def_property_readonly("batches_per_epoch", &PyDevicePipeline::batches_per_epoch)
      .def_property_readonly("pass_batches", &PyDevicePipeline::pass_batches);
  m.def("gpu_path_status", [](std::vector<std::string> nvjpeg) {
    gpu::CudaLibraryCandidates where;
    if (!nvjpeg.empty()) where.nvjpeg = std::move(nvjpeg);
    auto r = gpu::LoadCudaApi(where);
    return std::make_pair(r.ok(), r.ok() ? std::string() : r.status().message());
  }, "nvjpeg"_a = std::vector<std::string>{},
  "(available, reason): whether the GPU decode path (CUDA driver + nvJPEG) can be loaded");
  m.def("gpu_kernel_built", [] { return gpu::KernelPtx() != nullptr; },
        "whether the fused kernel's PTX was compiled into this build (STOKER_CUDA)");
}

}  // namespace stoker::py
