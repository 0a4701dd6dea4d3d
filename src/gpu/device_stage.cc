#include "gpu/device_stage.h"

#include <cstdint>
#include <algorithm>
#include <chrono>

#include "core/random.h"
#include "gpu/resize_kernel.h"
#include "ops/image_ops.h"
#include "pipeline/plan.h"
#include "pipeline/sample_ops.h"
#include "pipeline/stages.h"

namespace stoker::gpu {

#if defined(STOKER_HAVE_CUDA_PTX)
extern "C" const char stoker_resize_kernel_ptx[];
const char* KernelPtx() { return stoker_resize_kernel_ptx; }
#else
const char* KernelPtx() { return nullptr; }
#endif

namespace {
constexpr size_t kAlign = 256;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}
}  // namespace

struct DeviceStage::Slot {
  CUdeviceptr out = 0;
  size_t out_cap = 0;
  CUdeviceptr scratch = 0;
  size_t scratch_cap = 0;
  CUdeviceptr jobs_dev = 0;
  size_t jobs_cap = 0;           // ResizeJobs
  uint8_t* staging = nullptr;    // pinned: CPU-path images, indexed by batch position
  size_t staging_cap = 0;
  ResizeJob* jobs_host = nullptr;  // pinned
  size_t jobs_host_cap = 0;
  CUevent start = nullptr, done = nullptr, released = nullptr;
  bool in_use = false;           // handed out and not released
  bool pending = false;          // `done` recorded, its time not collected yet
  bool release_recorded = false;
  BatchPtr keep;                 // a host batch being uploaded (Upload)
};

struct DeviceStage::DecoderSet {
  int backend = 0;
  nvjpegJpegDecoder_t decoder = nullptr;
  struct State {
    nvjpegJpegState_t state = nullptr;
    nvjpegBufferPinned_t pinned = nullptr;
    nvjpegBufferDevice_t device = nullptr;
    nvjpegJpegStream_t jstream = nullptr;
    CUevent used = nullptr;
    bool recorded = false;
  };
  std::vector<State> states;
  size_t next = 0;
};

DeviceBatch::~DeviceBatch() {
  if (released_ || slot_ < 0) return;
  if (auto owner = owner_.lock()) (void)(*owner)->ReleaseSlot(slot_, consumer_);
}

DeviceStage::DeviceStage(const CudaApi* api, const PipelineOptions& opts,
                         const DeviceStageConfig& cfg)
    : api_(api), opts_(opts), cpu_opts_(opts), cfg_(cfg) {
  self_ = std::make_shared<DeviceStage*>(this);
}

Status DeviceStage::Check(const char* call, CUresult r) const {
  if (r == kCudaSuccess) return Status::OK();
  return Internal("GPU path: {}", api_->Error(call, r));
}

#define STOKER_CU(call, ...) STOKER_RETURN_IF_ERROR(Check(#call, api_->call(__VA_ARGS__)))

Result<std::unique_ptr<DeviceStage>> DeviceStage::Create(const CudaApi* api,
                                                         const PipelineOptions& opts,
                                                         const DeviceStageConfig& cfg) {
  if (api == nullptr) return InvalidArgument("GPU path: no CUDA API table");
  if (opts.mode == DecodeMode::kRaw) return InvalidArgument("GPU path: decode=raw has nothing to decode");
  std::unique_ptr<DeviceStage> s(new DeviceStage(api, opts, cfg));
  STOKER_RETURN_IF_ERROR(s->Init());
  return s;
}

Status DeviceStage::Init() {
  CUdevice dev = 0;
  STOKER_CU(cuDeviceGet, &dev, cfg_.device);
  STOKER_CU(cuDevicePrimaryCtxRetain, &ctx_, dev);
  STOKER_CU(cuCtxSetCurrent, ctx_);
  if (cfg_.stream) {
    stream_ = cfg_.stream;
  } else {
    STOKER_CU(cuStreamCreate, &stream_, kStreamNonBlocking);
    own_stream_ = true;
  }
  STOKER_CU(cuModuleLoadData, &module_, cfg_.kernel_ptx);
  STOKER_CU(cuModuleGetFunction, &kernel_, module_, kResizeKernelName);
  if (api_->nvjpegCreateEx(kNvjpegBackendDefault, nullptr, nullptr, 0, &nvjpeg_) != kNvjpegSuccess)
    return Internal("GPU path: nvjpegCreateEx failed (nvJPEG {})", api_->nvjpeg_path);
  auto make = [&](int backend) -> Result<std::unique_ptr<DecoderSet>> {
    auto d = std::make_unique<DecoderSet>();
    d->backend = backend;
    if (api_->nvjpegDecoderCreate(nvjpeg_, backend, &d->decoder) != kNvjpegSuccess)
      return Unimplemented("nvjpegDecoderCreate(backend {}) failed", backend);
    d->states.resize(std::max(1, cfg_.states_per_backend));
    for (auto& st : d->states) {
      if (api_->nvjpegDecoderStateCreate(nvjpeg_, d->decoder, &st.state) != kNvjpegSuccess ||
          api_->nvjpegBufferPinnedCreate(nvjpeg_, nullptr, &st.pinned) != kNvjpegSuccess ||
          api_->nvjpegBufferDeviceCreate(nvjpeg_, nullptr, &st.device) != kNvjpegSuccess ||
          api_->nvjpegStateAttachPinnedBuffer(st.state, st.pinned) != kNvjpegSuccess ||
          api_->nvjpegStateAttachDeviceBuffer(st.state, st.device) != kNvjpegSuccess ||
          api_->nvjpegJpegStreamCreate(nvjpeg_, &st.jstream) != kNvjpegSuccess)
        return Internal("GPU path: creating an nvJPEG decoder state failed");
      STOKER_CU(cuEventCreate, &st.used, kEventDisableTiming);
    }
    return d;
  };
  STOKER_ASSIGN_OR_RETURN(host_dec_, make(kNvjpegBackendHybrid));
  auto dd = make(kNvjpegBackendGpuHybrid);
  if (dd.ok()) {
    device_dec_ = std::move(*dd);
  } else {
    cfg_.hybrid.device_huffman_available = false;  // every image's Huffman stage on the CPU
  }
  return Status::OK();
}

DeviceStage::~DeviceStage() {
  self_.reset();  // batches still alive no longer release into us
  if (ctx_) api_->cuCtxSetCurrent(ctx_);
  for (auto& s : slots_) {
    if (s->pending) api_->cuEventSynchronize(s->done);
  }
  for (auto* d : {host_dec_.get(), device_dec_.get()}) {
    if (!d) continue;
    for (auto& st : d->states) {
      if (st.recorded) api_->cuEventSynchronize(st.used);
      api_->nvjpegJpegStreamDestroy(st.jstream);
      api_->nvjpegJpegStateDestroy(st.state);
      api_->nvjpegBufferPinnedDestroy(st.pinned);
      api_->nvjpegBufferDeviceDestroy(st.device);
      api_->cuEventDestroy(st.used);
    }
    api_->nvjpegDecoderDestroy(d->decoder);
  }
  for (auto& s : slots_) {
    // A batch still held by the consumer keeps its device memory (leaked rather than freed
    // under a kernel that may still read it).
    if (s->in_use) continue;
    if (s->out) api_->cuMemFree(s->out);
    if (s->scratch) api_->cuMemFree(s->scratch);
    if (s->jobs_dev) api_->cuMemFree(s->jobs_dev);
    if (s->staging) api_->cuMemFreeHost(s->staging);
    if (s->jobs_host) api_->cuMemFreeHost(s->jobs_host);
    api_->cuEventDestroy(s->start);
    api_->cuEventDestroy(s->done);
    api_->cuEventDestroy(s->released);
  }
  if (nvjpeg_) api_->nvjpegDestroy(nvjpeg_);
  if (own_stream_ && stream_) api_->cuStreamDestroy(stream_);
}

Result<int> DeviceStage::AcquireSlot() {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = slots_.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (next_slot_ + k) % n;
    if (!slots_[i]->in_use) {
      next_slot_ = i + 1;
      return static_cast<int>(i);
    }
  }
  if (n >= 64) return Internal("GPU path: the consumer holds 64 batches; release some");
  auto s = std::make_unique<Slot>();
  STOKER_CU(cuEventCreate, &s->start, 0);
  STOKER_CU(cuEventCreate, &s->done, 0);
  STOKER_CU(cuEventCreate, &s->released, kEventDisableTiming);
  slots_.push_back(std::move(s));
  next_slot_ = slots_.size();
  return static_cast<int>(slots_.size() - 1);
}

Status DeviceStage::ReleaseSlot(int slot, CUstream consumer) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = *slots_[static_cast<size_t>(slot)];
  api_->cuCtxSetCurrent(ctx_);
  STOKER_CU(cuEventRecord, s.released, consumer ? consumer : stream_);
  s.release_recorded = true;
  s.in_use = false;
  return Status::OK();
}

Status DeviceStage::HandOver(DeviceBatch* b, CUstream consumer) {
  STOKER_CU(cuStreamWaitEvent, consumer, b->ready, 0);
  b->consumer_ = consumer;
  return Status::OK();
}

Status DeviceStage::Release(DeviceBatch* b) {
  if (b->released_ || b->slot_ < 0) return Status::OK();
  b->released_ = true;
  return ReleaseSlot(b->slot_, b->consumer_);
}

Status DeviceStage::PrepareSlot(int si, int n) {
  Slot& slot = *slots_[static_cast<size_t>(si)];
  const size_t image_bytes = opts_.output.bytes();
  // The slot's previous batch: its host buffers are read by copies on our stream, so wait
  // for that batch (our own work, `slots` batches back) before overwriting them.
  if (slot.pending) {
    STOKER_CU(cuEventSynchronize, slot.done);
    float ms = 0;
    if (api_->cuEventElapsedTime(&ms, slot.start, slot.done) == kCudaSuccess) {
      stats_.gpu_ms += ms;
      ++stats_.gpu_ms_batches;
    }
    slot.pending = false;
  }
  slot.keep.reset();
  // The consumer's last use of this slot's output comes before our writes (device-side).
  if (slot.release_recorded) {
    STOKER_CU(cuStreamWaitEvent, stream_, slot.released, 0);
    slot.release_recorded = false;
  }
  STOKER_CU(cuEventRecord, slot.start, stream_);

  // Buffers for a batch of this size.
  const size_t out_need = std::max<size_t>(1, static_cast<size_t>(n) * image_bytes);
  if (slot.out_cap < out_need) {
    if (slot.out) STOKER_CU(cuMemFree, slot.out);
    slot.out = 0;
    slot.out_cap = 0;
    CUresult r = api_->cuMemAlloc(&slot.out, out_need);
    if (r != kCudaSuccess)
      return Status(StatusCode::kUnimplemented,
                    fmt::format("GPU path: no device memory for a batch of {} images ({:.1f} MB): {}; "
                                "lower batch_size", n, out_need / 1e6, api_->Error("cuMemAlloc", r)));
    slot.out_cap = out_need;
    stats_.output_bytes += static_cast<int64_t>(out_need);
  }
  if (slot.staging_cap < out_need) {
    if (slot.staging) STOKER_CU(cuMemFreeHost, slot.staging);
    void* p = nullptr;
    slot.staging = nullptr;
    STOKER_CU(cuMemAllocHost, &p, out_need);
    slot.staging = static_cast<uint8_t*>(p);
    slot.staging_cap = out_need;
  }
  if (slot.jobs_cap < static_cast<size_t>(n) || slot.jobs_host_cap < static_cast<size_t>(n)) {
    if (slot.jobs_dev) STOKER_CU(cuMemFree, slot.jobs_dev);
    if (slot.jobs_host) STOKER_CU(cuMemFreeHost, slot.jobs_host);
    slot.jobs_dev = 0;
    slot.jobs_host = nullptr;
    const size_t cap = static_cast<size_t>(std::max(n, 1));
    STOKER_CU(cuMemAlloc, &slot.jobs_dev, cap * sizeof(ResizeJob));
    void* p = nullptr;
    STOKER_CU(cuMemAllocHost, &p, cap * sizeof(ResizeJob));
    slot.jobs_host = static_cast<ResizeJob*>(p);
    slot.jobs_cap = slot.jobs_host_cap = cap;
  }

  return Status::OK();
}

DeviceBatchPtr DeviceStage::Finish(int si, DeviceBatchPtr out) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = *slots_[static_cast<size_t>(si)];
  slot.pending = true;
  slot.in_use = true;
  out->images = slot.out;
  out->ready = slot.done;
  out->owner_ = self_;
  out->slot_ = si;
  ++stats_.batches;
  stats_.images += out->size;
  return out;
}

Result<DeviceBatchPtr> DeviceStage::Upload(const BatchPtr& host_ptr) {
  const Batch& host = *host_ptr;
  const auto t0 = std::chrono::steady_clock::now();
  STOKER_CU(cuCtxSetCurrent, ctx_);
  const size_t image_bytes = opts_.output.bytes();
  if (host.images == nullptr && host.size > 0)
    return InvalidArgument("GPU path: batch {} has no images to upload", host.index);
  STOKER_ASSIGN_OR_RETURN(int si, AcquireSlot());
  STOKER_RETURN_IF_ERROR(PrepareSlot(si, host.size));
  Slot& slot = *slots_[static_cast<size_t>(si)];
  if (host.size > 0)
    STOKER_CU(cuMemcpyHtoDAsync, slot.out, host.images, static_cast<size_t>(host.size) * image_bytes,
              stream_);
  STOKER_CU(cuEventRecord, slot.done, stream_);
  slot.keep = host_ptr;
  auto out = std::make_shared<DeviceBatch>();
  out->epoch = host.epoch;
  out->index = host.index;
  out->size = host.size;
  out->height = host.height;
  out->width = host.width;
  out->layout = host.layout;
  out->image_bytes = image_bytes;
  out->device = cfg_.device;
  out->labels = host.labels;
  out->sample_indices = host.sample_indices;
  out->keys = host.keys;
  stats_.host_seconds += Seconds(t0);
  return Finish(si, std::move(out));
}

Result<DeviceBatchPtr> DeviceStage::Process(const Batch& raw) {
  const auto t0 = std::chrono::steady_clock::now();
  STOKER_CU(cuCtxSetCurrent, ctx_);
  const int n = raw.size;
  if (raw.raw_offsets.size() != static_cast<size_t>(n) + 1 || raw.sample_indices.size() < static_cast<size_t>(n))
    return InvalidArgument("GPU path: batch {} is not a raw batch of {} samples", raw.index, n);
  const size_t image_bytes = opts_.output.bytes();

  STOKER_ASSIGN_OR_RETURN(int si, AcquireSlot());
  STOKER_RETURN_IF_ERROR(PrepareSlot(si, n));
  Slot& slot = *slots_[static_cast<size_t>(si)];

  // 1. Routes.
  std::vector<RouteDecision> route(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const uint8_t* d = raw.raw.data() + raw.raw_offsets[i];
    const size_t len = raw.raw_offsets[i + 1] - raw.raw_offsets[i];
    route[i] = RouteImage(d, len, cfg_.hybrid);
    if (route[i].route != DecodeRoute::kCpu && opts_.exif_orientation &&
        ReadJpegExifOrientation(d, len) != 1) {
      route[i].route = DecodeRoute::kCpu;
      route[i].reason = FallbackReason::kOrientation;
    }
  }

  // 2. Crop, flip and resize plan of the GPU images: the CPU path's functions, on the
  // full-size decode nvJPEG produces.
  std::vector<ResizeJob> job(static_cast<size_t>(n));
  std::vector<size_t> scratch_off(static_cast<size_t>(n), 0);
  size_t scratch_need = 0;
  for (int i = 0; i < n; ++i) {
    if (route[i].route == DecodeRoute::kCpu) continue;
    const int w = route[i].traits.width, h = route[i].traits.height;
    DecodedImage full;
    full.width = full.source_width = w;
    full.height = full.source_height = h;
    full.crop = CropRect{0, 0, w, h};
    full.scale_num = 8;
    ResizePlan plan;
    bool flip = false;
    const uint64_t index = raw.sample_indices[i];
    if (opts_.mode == DecodeMode::kTrain) {
      Rng crop_rng(opts_.seed, static_cast<uint64_t>(raw.epoch), index, kStreamCrop);
      const CropRect crop = RandomResizedCropRect(w, h, opts_.rrc, crop_rng);
      Rng flip_rng(opts_.seed, static_cast<uint64_t>(raw.epoch), index, kStreamFlip);
      flip = flip_rng.Uniform() < opts_.flip_prob;
      plan = CropResizePlan(full, crop);
    } else {
      plan = CenterCropResizePlan(full, CenterCropRectFor(w, h, opts_.val_resize, opts_.image_size));
    }
    job[i] = JobFromPlan(plan, w, h, flip);
    scratch_off[i] = scratch_need;
    scratch_need += AlignUp(static_cast<size_t>(w) * h * 3);
  }
  // Scratch for the decoded GPU images; what does not fit goes to the CPU path.
  if (scratch_need > slot.scratch_cap) {
    if (slot.scratch) STOKER_CU(cuMemFree, slot.scratch);
    slot.scratch = 0;
    slot.scratch_cap = 0;
    size_t want = scratch_need;
    while (want >= kAlign) {
      if (api_->cuMemAlloc(&slot.scratch, want) == kCudaSuccess) {
        slot.scratch_cap = want;
        break;
      }
      want /= 2;
    }
    stats_.scratch_bytes = std::max<int64_t>(stats_.scratch_bytes, static_cast<int64_t>(slot.scratch_cap));
  }
  for (int i = 0; i < n; ++i) {
    if (route[i].route == DecodeRoute::kCpu) continue;
    const size_t need = AlignUp(static_cast<size_t>(job[i].src_w) * job[i].src_h * 3);
    if (scratch_off[i] + need > slot.scratch_cap) {
      route[i].route = DecodeRoute::kCpu;
      route[i].reason = FallbackReason::kGpuMemory;
    }
  }

  // 3. nvJPEG: host phase on this thread, then transfer and device phase on our stream.
  for (int i = 0; i < n; ++i) {
    if (route[i].route == DecodeRoute::kCpu) continue;
    DecoderSet* ds = route[i].route == DecodeRoute::kGpuDeviceHuffman && device_dec_
                         ? device_dec_.get() : host_dec_.get();
    auto& st = ds->states[ds->next];
    ds->next = (ds->next + 1) % ds->states.size();
    if (st.recorded) STOKER_CU(cuEventSynchronize, st.used);  // our work, states-1 images back
    const uint8_t* d = raw.raw.data() + raw.raw_offsets[i];
    const size_t len = raw.raw_offsets[i + 1] - raw.raw_offsets[i];
    nvjpegImage_t dst{};
    dst.channel[0] = reinterpret_cast<unsigned char*>(static_cast<uintptr_t>(slot.scratch + scratch_off[i]));
    dst.pitch[0] = static_cast<size_t>(job[i].src_pitch);
    nvjpegDecodeParams_t params = nullptr;
    bool ok = api_->nvjpegDecodeParamsCreate(nvjpeg_, &params) == kNvjpegSuccess &&
              api_->nvjpegDecodeParamsSetOutputFormat(params, kNvjpegOutputRgbi) == kNvjpegSuccess &&
              api_->nvjpegJpegStreamParse(nvjpeg_, d, len, 0, 0, st.jstream) == kNvjpegSuccess &&
              api_->nvjpegDecodeJpegHost(nvjpeg_, ds->decoder, st.state, params, st.jstream) == kNvjpegSuccess &&
              api_->nvjpegDecodeJpegTransferToDevice(nvjpeg_, ds->decoder, st.state, st.jstream,
                                                    stream_) == kNvjpegSuccess &&
              api_->nvjpegDecodeJpegDevice(nvjpeg_, ds->decoder, st.state, &dst, stream_) == kNvjpegSuccess;
    if (params) api_->nvjpegDecodeParamsDestroy(params);
    STOKER_CU(cuEventRecord, st.used, stream_);
    st.recorded = true;
    if (!ok) {
      route[i].route = DecodeRoute::kCpu;
      route[i].reason = FallbackReason::kGpuRejected;
    }
  }

  // 4. The CPU path for the rest, into pinned staging at the sample's batch index.
  auto out = std::make_shared<DeviceBatch>();
  out->epoch = raw.epoch;
  out->index = raw.index;
  out->height = opts_.output.height;
  out->width = opts_.output.width;
  out->layout = opts_.output.layout;
  out->image_bytes = image_bytes;
  out->device = cfg_.device;
  std::vector<bool> keep(static_cast<size_t>(n), true);
  ResizeScratch scratch;
  const auto tc = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    const RouteDecision& r = route[i];
    if (r.route != DecodeRoute::kCpu) {
      ++(r.route == DecodeRoute::kGpuDeviceHuffman ? stats_.gpu_device_huffman : stats_.gpu_host_huffman);
      continue;
    }
    ++stats_.cpu;
    stats_.fallbacks.Add(r.reason);
    ++out->cpu_fallbacks;
    Item it;
    it.index = raw.sample_indices[i];
    it.sample.key = i < static_cast<int>(raw.keys.size()) ? raw.keys[i] : fmt::format("#{}", it.index);
    it.sample.location = it.sample.key;
    it.sample.label = i < static_cast<int>(raw.labels.size()) ? raw.labels[i] : -1;
    Field* f = it.sample.AddField("jpg");
    f->data.assign(raw.raw.data() + raw.raw_offsets[i], raw.raw.data() + raw.raw_offsets[i + 1]);
    Status s = DecodeSample(cpu_opts_, raw.epoch, &it);
    size_t bytes = 0;
    if (s.ok()) s = AugmentSample(cpu_opts_, &it, slot.staging + static_cast<size_t>(i) * image_bytes,
                                  nullptr, &scratch, &bytes);
    if (!s.ok()) {
      if (opts_.on_error == ErrorPolicy::kFail)
        return Status(s.code(), fmt::format("sample '{}' (dataset index {}): {}", it.sample.key,
                                            it.index, s.message()));
      keep[i] = false;
      ++stats_.skipped;
      out->skipped.push_back(fmt::format("{}: {}", it.sample.key, s.message()));
    }
  }
  stats_.cpu_fallback_seconds += Seconds(tc);

  // 5. Slots in batch order for the kept samples; CPU images copied in, one kernel for the rest.
  int pos = 0;
  for (int i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    const CUdeviceptr dst = slot.out + static_cast<size_t>(pos) * image_bytes;
    ResizeJob j = job[i];
    if (route[i].route == DecodeRoute::kCpu) {
      STOKER_CU(cuMemcpyHtoDAsync, dst, slot.staging + static_cast<size_t>(i) * image_bytes,
                image_bytes, stream_);
      j = ResizeJob{};
    } else {
      j.src = slot.scratch + scratch_off[i];
    }
    j.dst = dst;
    slot.jobs_host[pos] = j;
    out->labels.push_back(i < static_cast<int>(raw.labels.size()) ? raw.labels[i] : -1);
    out->sample_indices.push_back(raw.sample_indices[i]);
    if (i < static_cast<int>(raw.keys.size())) out->keys.push_back(raw.keys[i]);
    ++pos;
  }
  out->size = pos;
  ResizeLaunch L;
  L.out_w = opts_.output.width;
  L.out_h = opts_.output.height;
  L.layout_uint8 = opts_.output.layout == OutputLayout::kUint8HWC ? 1 : 0;
  for (int c = 0; c < 3; ++c) {
    L.scale[c] = L.layout_uint8 ? 1.0f : 1.0f / opts_.output.std[c];
    L.bias[c] = L.layout_uint8 ? 0.0f : -opts_.output.mean[c] / opts_.output.std[c];
  }
  L.num_jobs = pos;
  if (pos > 0 && pos > out->cpu_fallbacks - static_cast<int>(out->skipped.size())) {
    STOKER_CU(cuMemcpyHtoDAsync, slot.jobs_dev, slot.jobs_host, static_cast<size_t>(pos) * sizeof(ResizeJob),
              stream_);
    void* args[] = {&slot.jobs_dev, &L};
    const unsigned pixels = static_cast<unsigned>(L.out_w * L.out_h);
    STOKER_CU(cuLaunchKernel, kernel_, (pixels + kResizeBlock - 1) / kResizeBlock,
              static_cast<unsigned>(pos), 1, kResizeBlock, 1, 1, 0, stream_, args, nullptr);
  }
  STOKER_CU(cuEventRecord, slot.done, stream_);
  stats_.host_seconds += Seconds(t0);
  return Finish(si, std::move(out));
}

#undef STOKER_CU

}  // namespace stoker::gpu
