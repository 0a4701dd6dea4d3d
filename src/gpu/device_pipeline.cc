#include "gpu/device_pipeline.h"

#include <cstdint>
#include <cmath>

#include "telemetry/sampler.h"

namespace stoker::gpu {

namespace {

// NVML utilization of one device as a busy fraction, sampled on demand.
std::function<double()> NvmlBusy(int device) {
  using telemetry::GpuSample;
  using telemetry::NvmlSampler;
  auto s = NvmlSampler::Open();
  if (!s.ok()) return [] { return -1.0; };
  std::shared_ptr<NvmlSampler> sampler(std::move(*s));
  return [sampler, device] {
    for (const GpuSample& g : sampler->Sample(0)) {
      if (g.gpu == device && std::isfinite(g.util)) return g.util / 100.0;
    }
    return -1.0;
  };
}

}  // namespace

Result<std::unique_ptr<DevicePipeline>> DevicePipeline::Create(const PipelineOptions& opts,
                                                               const CudaApi* api,
                                                               DevicePipelineConfig cfg) {
  if (opts.mode == DecodeMode::kRaw)
    return InvalidArgument("device=cuda delivers images; decode=raw batches stay on the host");
  if (api == nullptr) {
    STOKER_ASSIGN_OR_RETURN(api, LoadCudaApi());
  }
  std::unique_ptr<DevicePipeline> p(new DevicePipeline);
  p->opts_ = opts;
  p->api_ = api;
  p->clock_ = cfg.clock ? cfg.clock : (opts.clock ? opts.clock : Clock::Real());
  cfg.stage.hybrid.device_huffman_min_pixels = opts.gpu_hybrid_threshold;
  if (cfg.stage.kernel_ptx == nullptr) cfg.stage.kernel_ptx = KernelPtx();
  if (!cfg.gpu_busy && opts.gpu_decode == GpuDecode::kAuto) cfg.gpu_busy = NvmlBusy(cfg.stage.device);
  p->cfg_ = cfg;
  STOKER_ASSIGN_OR_RETURN(p->stage_, DeviceStage::Create(api, opts, cfg.stage));
  if (opts.gpu_decode == GpuDecode::kAuto) {
    int cores = opts.cpu_budget;
    STOKER_RETURN_IF_ERROR(p->Build(false));
    if (cores <= 0) cores = p->engine_->Stats().cpu_budget;
    if (cores <= 0) cores = 1;
    p->auto_ = std::make_unique<AutoOffload>(cfg.auto_config, cores, p->clock_);
    p->decision_.reason = "measuring the CPU path first";
  } else {
    STOKER_RETURN_IF_ERROR(p->Build(opts.gpu_decode == GpuDecode::kOn));
  }
  return p;
}

Status DevicePipeline::Build(bool gpu) {
  PipelineOptions o = opts_;
  // The GPU path carries the encoded image: raw_field (default: the sample's first field,
  // a folder's image; for shards whose first field is not the image, set raw_field).
  if (gpu) o.mode = DecodeMode::kRaw;
  if (engine_) engine_->Stop();
  engine_.reset();
  STOKER_ASSIGN_OR_RETURN(engine_, Pipeline::Create(o));
  gpu_active_ = gpu;
  return Status::OK();
}

void DevicePipeline::ObserveEpoch() {
  if (!auto_) return;
  const PipelineStats st = engine_->Stats();
  if (!gpu_active_) {
    double cpu = 0;
    for (const auto& s : st.stages) cpu += s.cpu_s;
    auto_->ObserveCpuDecode(cpu, static_cast<int64_t>(st.samples));
  } else if (stage_->stats().gpu_ms_batches > 0 && stage_->stats().images > 0) {
    const DeviceStageStats& g = stage_->stats();
    auto_->ObserveGpuPath(g.gpu_ms * 1e-3 / std::max<int64_t>(1, g.images),
                          g.host_seconds / std::max<int64_t>(1, g.images));
  }
  auto_->ObserveConsumed(consumed_);
  auto_->ObserveConsumerWait(wait_s_);
  consumed_ = 0;
  wait_s_ = 0;
}

Status DevicePipeline::StartEpoch(int epoch, uint64_t start_batch) {
  if (auto_) {
    ObserveEpoch();
    decision_ = auto_->Decide();
    if (decision_.verdict != OffloadVerdict::kUnknown && decision_.use_gpu != gpu_active_)
      STOKER_RETURN_IF_ERROR(Build(decision_.use_gpu));
  }
  return engine_->StartEpoch(epoch, start_batch);
}

Status DevicePipeline::ResumeEpoch(int epoch, uint64_t consumed) {
  return engine_->ResumeEpoch(epoch, consumed);
}

Result<DeviceBatchPtr> DevicePipeline::Next() {
  const double t0 = clock_->NowSeconds();
  auto b = engine_->Next();
  wait_s_ += clock_->NowSeconds() - t0;
  if (!b.ok()) return b.status();
  if (auto_ && cfg_.gpu_busy) {
    const double busy = cfg_.gpu_busy();
    if (busy >= 0) auto_->ObserveGpuBusy(busy);
  }
  consumed_ += (*b)->size;
  if (gpu_active_) return stage_->Process(**b);
  return stage_->Upload(*b);
}

void DevicePipeline::Stop() {
  if (engine_) engine_->Stop();
}

}  // namespace stoker::gpu
