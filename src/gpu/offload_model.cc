#include "gpu/offload_model.h"

#include <cstdint>
#include <algorithm>

#include <fmt/format.h>

namespace stoker::gpu {

const char* OffloadVerdictName(OffloadVerdict v) {
  switch (v) {
    case OffloadVerdict::kUnknown: return "unknown";
    case OffloadVerdict::kCpuKeepsUp: return "cpu-keeps-up";
    case OffloadVerdict::kGpuBusy: return "gpu-busy";
    case OffloadVerdict::kNoGain: return "no-gain";
    case OffloadVerdict::kOffload: return "offload";
  }
  return "?";
}

OffloadDecision DecideOffload(const OffloadInputs& in, const OffloadThresholds& th) {
  OffloadDecision d;
  if (in.cpu_s_per_image <= 0 || in.cpu_cores <= 0) {
    d.reason = "no CPU decode cost measured yet";
    return d;
  }
  d.cpu_rate = in.cpu_cores / in.cpu_s_per_image;
  const double gpu_s = in.gpu_s_per_image > 0 ? in.gpu_s_per_image : th.default_gpu_s_per_image;
  const double host_s = in.host_s_per_image > 0 ? in.host_s_per_image
                                                 : in.cpu_s_per_image * th.default_host_fraction;
  const double busy = std::clamp(in.gpu_busy_frac, 0.0, 1.0);
  const double free_frac = in.gpu_busy_frac < 0 ? 1.0 : 1.0 - busy;
  const double usable = std::max(0.0, free_frac - th.gpu_reserve);
  const double host_rate = in.cpu_cores / host_s;
  const double gpu_limit = usable / gpu_s;
  d.gpu_rate = std::min(host_rate, gpu_limit);
  if (in.required_images_per_s <= 0) {
    d.reason = fmt::format("the step's demand is not measured yet (CPU path {:.0f} images/s)",
                           d.cpu_rate);
    return d;
  }
  if (in.gpu_busy_frac < 0) {
    d.reason = "the GPU's busy time is not measured yet";
    return d;
  }
  const double need = in.required_images_per_s;
  if (d.cpu_rate >= need * (1 + th.cpu_margin)) {
    d.verdict = OffloadVerdict::kCpuKeepsUp;
    d.reason = fmt::format("the CPU path feeds {:.0f} images/s on {} cores; the step needs "
                           "{:.0f}", d.cpu_rate, in.cpu_cores, need);
    return d;
  }
  const double deliver = std::min(need, d.gpu_rate);
  d.gpu_load_added = deliver * gpu_s;
  if (need * gpu_s > usable) {
    if (gpu_limit <= d.cpu_rate) {
      d.verdict = OffloadVerdict::kGpuBusy;
      d.reason = fmt::format("the GPU is {:.0f}% busy: decoding {:.0f} images/s would need "
                             "{:.0f}% of it, {:.0f}% is free", 100 * busy, need,
                             100 * need * gpu_s, 100 * free_frac);
      return d;
    }
  }
  if (d.gpu_rate <= d.cpu_rate * (1 + th.cpu_margin)) {
    d.verdict = OffloadVerdict::kNoGain;
    d.reason = fmt::format("the GPU path would deliver {:.0f} images/s (host {:.0f}, GPU "
                           "{:.0f}), no more than the CPU path's {:.0f}", d.gpu_rate, host_rate,
                           gpu_limit, d.cpu_rate);
    return d;
  }
  d.verdict = OffloadVerdict::kOffload;
  d.use_gpu = true;
  d.reason = fmt::format("the CPU path feeds {:.0f} of the {:.0f} images/s the step needs; "
                         "the GPU ({:.0f}% busy) can decode {:.0f} images/s for {:.0f}% more "
                         "GPU time", d.cpu_rate, need, 100 * busy, d.gpu_rate,
                         100 * d.gpu_load_added);
  return d;
}

AutoOffload::AutoOffload(const Config& cfg, int cpu_cores, Clock* clock)
    : cfg_(cfg), cores_(cpu_cores), clock_(clock ? clock : Clock::Real()) {
  ResetWindow();
  current_.reason = "measuring";
}

void AutoOffload::ResetWindow() {
  window_start_ = clock_->NowSeconds();
  cpu_s_ = wait_s_ = 0;
  cpu_images_ = consumed_ = 0;
  gpu_busy_sum_ = 0;
  gpu_busy_n_ = 0;
}

void AutoOffload::ObserveCpuDecode(double cpu_seconds, int64_t images) {
  cpu_s_ += cpu_seconds;
  cpu_images_ += images;
}
void AutoOffload::ObserveConsumed(int64_t images) { consumed_ += images; }
void AutoOffload::ObserveConsumerWait(double seconds) { wait_s_ += seconds; }
void AutoOffload::ObserveGpuBusy(double frac) {
  gpu_busy_sum_ += frac;
  ++gpu_busy_n_;
}
void AutoOffload::ObserveGpuPath(double gpu_s_per_image, double host_s_per_image) {
  gpu_s_per_image_ = gpu_s_per_image;
  host_s_per_image_ = host_s_per_image;
}

OffloadInputs AutoOffload::inputs() const {
  OffloadInputs in;
  in.cpu_cores = cores_;
  // The CPU path's cost is measured while it runs; on the GPU path the last one is kept.
  in.cpu_s_per_image = cpu_images_ > 0 ? cpu_s_ / cpu_images_ : last_cpu_s_per_image_;
  const double elapsed = clock_->NowSeconds() - window_start_;
  // The step's demand: images taken per second of the window the consumer did not spend
  // waiting for data (while it waits, the step is not what limits the rate).
  const double stepping = elapsed - wait_s_;
  in.required_images_per_s = stepping > 0 && consumed_ > 0 ? consumed_ / stepping : 0;
  in.gpu_busy_frac = gpu_busy_n_ > 0 ? gpu_busy_sum_ / gpu_busy_n_ : -1;
  // On the GPU path the busy time includes the offloaded work itself: the model wants
  // what the training step leaves free.
  if (current_.use_gpu && in.gpu_busy_frac >= 0 && gpu_s_per_image_ > 0 && elapsed > 0)
    in.gpu_busy_frac = std::max(0.0, in.gpu_busy_frac - consumed_ / elapsed * gpu_s_per_image_);
  in.gpu_s_per_image = gpu_s_per_image_;
  in.host_s_per_image = host_s_per_image_;
  return in;
}

const OffloadDecision& AutoOffload::Decide() {
  const double now = clock_->NowSeconds();
  if (now - window_start_ < cfg_.window_s || std::max(cpu_images_, consumed_) < cfg_.min_images)
    return current_;
  if (cpu_images_ > 0) last_cpu_s_per_image_ = cpu_s_ / cpu_images_;
  if (now - last_change_ < cfg_.min_dwell_s) {
    ResetWindow();
    return current_;
  }
  OffloadDecision d = DecideOffload(inputs(), cfg_.thresholds);
  ResetWindow();
  if (d.verdict == OffloadVerdict::kUnknown) return current_;
  if (d.use_gpu != current_.use_gpu || current_.verdict == OffloadVerdict::kUnknown)
    last_change_ = now;
  current_ = d;
  return current_;
}

}  // namespace stoker::gpu
