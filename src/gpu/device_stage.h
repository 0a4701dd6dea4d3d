// The GPU decode + augment stage: turns a batch of encoded images (the CPU pipeline's
// decode="raw" batch: the image field's bytes back to back, labels, dataset indices) into
// the final NCHW float / NHWC uint8 batch in device memory.
//
// Per batch, on one CUDA stream of its own and without a host sync on the training stream:
//   1. route every image (route.h): the CPU path for what nvJPEG does not decode, nvJPEG's
//      hybrid backend (Huffman on this thread) for small images, the GPU-hybrid backend
//      (Huffman on the GPU) for large ones;
//   2. the crop and flip of each sample from the CPU path's own functions (seeded by seed,
//      epoch and dataset index; RandomResizedCropRect / CenterCropRectFor, then
//      CropResizePlan / CenterCropResizePlan on the full-size decode), so the parameters
//      are identical to decode="train"/"val" on the CPU;
//   3. nvJPEG decode of the GPU images into a device scratch buffer; an image nvJPEG
//      refuses goes to the CPU path (counted: gpu-rejected);
//   4. CPU-path images are decoded and augmented on this thread into pinned memory and
//      copied into their slots;
//   5. one launch of the fused kernel (resize_kernel.h) for the whole batch, then an event.
// The consumer's stream waits on that event (HandOver); when the consumer lets the batch
// go, an event is recorded on its stream and the slot is reused only after it (Release):
// the stage's stream waits on it, the host never does.
//
// Host waits happen only on the stage's own earlier work (cuEventSynchronize of a slot's
// previous batch, or of an nvJPEG state `kStatesPerBackend` images back), never on the
// training stream. One thread calls Process/Upload; batches may be released from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "gpu/cuda_api.h"
#include "gpu/route.h"
#include "pipeline/pipeline.h"

namespace stoker::gpu {

struct DeviceStageConfig {
  int device = 0;
  HybridPolicy hybrid;
  int slots = 3;               // output batches that may be in flight at once (grows if held)
  int states_per_backend = 8;  // nvJPEG decoder states in rotation per backend
  // The kernel's PTX (KernelPtx() when built with STOKER_CUDA); null: the table's
  // cuModuleLoadData is given nullptr (the fake ignores it).
  const char* kernel_ptx = nullptr;
  CUstream stream = nullptr;   // null: the stage creates a non-blocking stream
};

struct DeviceStageStats {
  int64_t batches = 0, images = 0;
  int64_t gpu_host_huffman = 0, gpu_device_huffman = 0, cpu = 0;
  FallbackCounts fallbacks;
  int64_t skipped = 0;          // samples dropped with on_error=skip
  double host_seconds = 0;      // wall time of Process on the calling thread
  double cpu_fallback_seconds = 0;
  double gpu_ms = 0;            // device time of completed batches (CUDA events)
  int64_t gpu_ms_batches = 0;
  int64_t scratch_bytes = 0, output_bytes = 0;
};

class DeviceStage;

// One batch in device memory. `ready` is recorded on the stage's stream after the batch's
// last write. Released (slot back to the stage) by DeviceStage::Release or, if never
// released, when the last reference goes (then ordered after `consumer` if one was set).
struct DeviceBatch {
  CUdeviceptr images = 0;      // [size, 3, H, W] float32 or [size, H, W, 3] uint8
  int size = 0, height = 0, width = 0;
  OutputLayout layout = OutputLayout::kFloatCHW;
  size_t image_bytes = 0;
  int device = 0;
  CUevent ready = nullptr;
  int epoch = 0;
  uint64_t index = 0;
  std::vector<int64_t> labels;
  std::vector<uint64_t> sample_indices;
  std::vector<std::string> keys;
  int cpu_fallbacks = 0;       // images of this batch decoded by the CPU path
  std::vector<std::string> skipped;  // "key: reason" of samples dropped (on_error=skip)

  ~DeviceBatch();
  DeviceBatch() = default;
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

 private:
  friend class DeviceStage;
  std::weak_ptr<DeviceStage*> owner_;
  int slot_ = -1;
  CUstream consumer_ = nullptr;
  bool released_ = false;
};
using DeviceBatchPtr = std::shared_ptr<DeviceBatch>;

class DeviceStage {
 public:
  // `opts` are the pipeline's (mode, crop, flip, output, seed, on_error, exif); the raw
  // batches given to Process must come from a pipeline with the same seed.
  static Result<std::unique_ptr<DeviceStage>> Create(const CudaApi* api, const PipelineOptions& opts,
                                                     const DeviceStageConfig& cfg);
  ~DeviceStage();

  // One raw batch (Batch::raw + raw_offsets, labels, sample_indices, keys) of `raw.epoch`.
  // Errors name the sample (on_error=fail) or the CUDA call.
  Result<DeviceBatchPtr> Process(const Batch& raw);
  // The CPU path's finished host batch (decode="train"/"val") copied into a device slot
  // on the stage's stream: the same DeviceBatch protocol for both paths.
  // The host batch is kept until the copy completed (it may be pinned: a truly async copy).
  Result<DeviceBatchPtr> Upload(const BatchPtr& host);
  // `consumer` waits for the batch (cuStreamWaitEvent; no host sync).
  Status HandOver(DeviceBatch* b, CUstream consumer);
  // The consumer's work on the batch so far is all it will do: the slot is reused after it.
  Status Release(DeviceBatch* b);

  CUstream stream() const { return stream_; }
  const DeviceStageStats& stats() const { return stats_; }
  const CudaApi* api() const { return api_; }

 private:
  friend struct DeviceBatch;
  struct Slot;
  struct DecoderSet;
  DeviceStage(const CudaApi* api, const PipelineOptions& opts, const DeviceStageConfig& cfg);
  Status Init();
  Result<int> AcquireSlot();
  // Waits for the slot's previous batch, orders after its release, sizes its buffers.
  Status PrepareSlot(int si, int n);
  DeviceBatchPtr Finish(int si, DeviceBatchPtr out);
  Status Check(const char* call, CUresult r) const;
  Status ReleaseSlot(int slot, CUstream consumer);

  const CudaApi* api_;
  PipelineOptions opts_;
  PipelineOptions cpu_opts_;  // the CPU path's options for fallbacks
  DeviceStageConfig cfg_;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  bool own_stream_ = false;
  CUmodule module_ = nullptr;
  CUfunction kernel_ = nullptr;
  nvjpegHandle_t nvjpeg_ = nullptr;
  std::unique_ptr<DecoderSet> host_dec_, device_dec_;
  std::mutex mu_;  // slot flags: batches are released from other threads (tensor deleters)
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t next_slot_ = 0;
  DeviceStageStats stats_;
  std::shared_ptr<DeviceStage*> self_;  // batches hold a weak_ptr: no release after we are gone
};

// The kernel's PTX embedded at build time (STOKER_CUDA), or nullptr in a CPU-only build.
const char* KernelPtx();

}  // namespace stoker::gpu
