// device=cuda: the pipeline as seen by a training loop on a GPU. Batches are device memory
// (DeviceBatch) whichever path made them:
//   GPU path  -- the CPU engine in decode="raw" mode reads and shuffles, the DeviceStage
//                decodes and augments on the GPU (per-image CPU fallback);
//   CPU path  -- the CPU engine decodes and augments, the DeviceStage copies the batch in.
// gpu_decode=on/off fixes the path; auto starts on the CPU path, measures (CPU decode
// cost from the engine's stats, the step's demand from how fast batches are taken, GPU
// busy time from NVML), and at each epoch boundary takes the offload model's decision
// (offload_model.h) for the next epoch. Both paths give the same samples in the same
// order (the same seed, epoch plan and crop functions), so switching changes speed only.
// Thread-safety: one consumer thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/clock.h"
#include "gpu/device_stage.h"
#include "gpu/offload_model.h"
#include "pipeline/pipeline.h"

namespace stoker::gpu {

struct DevicePipelineConfig {
  DeviceStageConfig stage;
  AutoOffload::Config auto_config;
  // GPU busy fraction now (0..1), or < 0 when unknown. Default: NVML utilization of the
  // device when NVML loads, else unknown (auto then stays on the CPU path).
  std::function<double()> gpu_busy;
  Clock* clock = nullptr;
};

class DevicePipeline {
 public:
  // `api` null: LoadCudaApi(). Fails (kUnimplemented, naming what is missing) when no GPU
  // can be used; the caller decides whether that falls back to the CPU with a warning.
  static Result<std::unique_ptr<DevicePipeline>> Create(const PipelineOptions& opts,
                                                        const CudaApi* api = nullptr,
                                                        DevicePipelineConfig cfg = {});
  Status StartEpoch(int epoch, uint64_t start_batch = 0);
  Status ResumeEpoch(int epoch, uint64_t consumed);
  // The next batch in device memory; kOutOfRange at the end of the epoch.
  Result<DeviceBatchPtr> Next();
  Status HandOver(DeviceBatch* b, CUstream consumer) { return stage_->HandOver(b, consumer); }
  Status Release(DeviceBatch* b) { return stage_->Release(b); }
  void Stop();

  bool gpu_decoding() const { return gpu_active_; }
  const OffloadDecision& decision() const { return decision_; }
  const DeviceStageStats& stage_stats() const { return stage_->stats(); }
  Pipeline& engine() { return *engine_; }
  const PipelineOptions& options() const { return opts_; }

 private:
  DevicePipeline() = default;
  Status Build(bool gpu);
  void ObserveEpoch();

  PipelineOptions opts_;
  DevicePipelineConfig cfg_;
  const CudaApi* api_ = nullptr;
  std::unique_ptr<DeviceStage> stage_;
  std::unique_ptr<Pipeline> engine_;
  bool gpu_active_ = false;
  std::unique_ptr<AutoOffload> auto_;
  OffloadDecision decision_;
  Clock* clock_ = nullptr;
  // Measurement of the epoch in progress (auto).
  double wait_s_ = 0;
  int64_t consumed_ = 0;
};

}  // namespace stoker::gpu
