// When does moving JPEG decode and augmentation to the GPU pay off? A small pure model,
// shared by the pipeline's gpu_decode=auto, the doctor (gpu.preprocess_offload) and
// `stoker plan`, so that all three give the same answer for the same numbers.
//
// It compares two ways of feeding the training step:
//   CPU path: cpu_cores / cpu_s_per_image images per second;
//   GPU path: limited by the host work that stays on the CPU (parsing, the Huffman stage of
//             small images in the hybrid split, CPU fallbacks) and by the GPU time the
//             decode and the fused kernel take out of what the training step leaves free.
// The GPU path is chosen only when the CPU path cannot feed the step (with a margin) AND
// the GPU has headroom for the work at the required rate AND the GPU path is faster.
// Depends on core only: doctor and plan include it (docs/architecture.md).
#pragma once

#include <cstdint>
#include <string>

#include "core/clock.h"

namespace stoker::gpu {

struct OffloadInputs {
  double cpu_s_per_image = 0;       // CPU seconds (one core) per image: read+decode+augment
  int cpu_cores = 0;                // cores the input pipeline may use
  double required_images_per_s = 0; // what the training step consumes; 0 = unknown
  double gpu_busy_frac = -1;        // GPU busy fraction with the CPU path; < 0 = unknown
  // GPU seconds per image of nvJPEG decode + the fused kernel; 0 = the default estimate.
  double gpu_s_per_image = 0;
  // CPU seconds per image left on the host by the GPU path; 0 = default fraction of
  // cpu_s_per_image (kDefaultHostFraction).
  double host_s_per_image = 0;
};

struct OffloadThresholds {
  double cpu_margin = 0.10;      // the CPU path must exceed the demand by this to "keep up"
  double gpu_reserve = 0.05;     // GPU busy fraction kept free after the offload
  // Defaults when not measured: nvJPEG on a datacenter GPU decodes an ImageNet-size JPEG
  // in ~0.25 ms of GPU time (hybrid) and leaves ~30 % of the CPU path's host work (file
  // read, parse, Huffman of small images); conservative, replaced by measurements.
  double default_gpu_s_per_image = 0.25e-3;
  double default_host_fraction = 0.30;
};

enum class OffloadVerdict {
  kUnknown,        // not enough measurements
  kCpuKeepsUp,     // the CPU path already feeds the step
  kGpuBusy,        // the GPU has no headroom for the work
  kNoGain,         // the GPU path would not be faster
  kOffload,        // move decode to the GPU
};
const char* OffloadVerdictName(OffloadVerdict v);  // "cpu-keeps-up", ...

struct OffloadDecision {
  OffloadVerdict verdict = OffloadVerdict::kUnknown;
  bool use_gpu = false;
  double cpu_rate = 0;          // images/s of the CPU path
  double gpu_rate = 0;          // images/s of the GPU path (min of host and GPU limits)
  double gpu_load_added = 0;    // GPU busy fraction the offload adds at the delivered rate
  std::string reason;           // one sentence with the numbers
};

// Pure: the same inputs give the same decision.
OffloadDecision DecideOffload(const OffloadInputs& in, const OffloadThresholds& th = {});

// gpu_decode=auto at run time: accumulates measurements over a window on an injected
// clock and decides when the window is long enough; a decision then holds for at least
// `min_dwell_s` (no flapping). Not thread-safe: the consumer thread owns it.
class AutoOffload {
 public:
  struct Config {
    double window_s = 5.0;         // measure at least this long before deciding
    int64_t min_images = 256;      // and at least this many images
    double min_dwell_s = 30.0;     // keep a decision at least this long
    OffloadThresholds thresholds;
  };
  AutoOffload(const Config& cfg, int cpu_cores, Clock* clock);

  // CPU time (seconds, all workers together) spent decoding+augmenting `images` images.
  void ObserveCpuDecode(double cpu_seconds, int64_t images);
  // The consumer took `images` images; the training step demands them at this rate.
  void ObserveConsumed(int64_t images);
  // Seconds the consumer waited for data in the window (not part of the step's demand).
  void ObserveConsumerWait(double seconds);
  // GPU busy fraction over the last interval (NVML utilization or CUDA-event busy time).
  void ObserveGpuBusy(double frac);
  // GPU/host costs of the GPU path once it runs (replaces the defaults).
  void ObserveGpuPath(double gpu_s_per_image, double host_s_per_image);

  // The current decision; re-evaluated when the window is complete and the dwell is over.
  const OffloadDecision& Decide();
  OffloadInputs inputs() const;  // what the next evaluation would see

 private:
  void ResetWindow();
  Config cfg_;
  int cores_;
  Clock* clock_;
  double window_start_ = 0, last_change_ = -1e300;
  double cpu_s_ = 0, wait_s_ = 0;
  int64_t cpu_images_ = 0, consumed_ = 0;
  double gpu_busy_sum_ = 0;
  int gpu_busy_n_ = 0;
  double gpu_s_per_image_ = 0, host_s_per_image_ = 0;
  double last_cpu_s_per_image_ = 0;
  OffloadDecision current_;
};

}  // namespace stoker::gpu
