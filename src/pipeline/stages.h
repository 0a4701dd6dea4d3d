// Internal to the executor: stage ids, per-stage counters, and the work item a sample is
// carried in from admission to its batch slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "codec/image.h"
#include "core/clock.h"
#include "formats/dataset.h"
#include "ops/image_ops.h"

namespace stoker {

enum StageId : int { kRead = 0, kDecode = 1, kAugment = 2, kBatchStage = 3, kNumStages = 4 };
inline const char* const kStageNames[kNumStages] = {"read", "decode", "augment", "batch"};

// Lock-free counters every worker adds to; Stats() and the tuner read them.
struct StageCounters {
  std::atomic<uint64_t> items{0}, bytes{0};
  std::atomic<int64_t> busy_ns{0}, cpu_ns{0}, wait_in_ns{0}, wait_out_ns{0};
  std::atomic<uint64_t> fill_samples{0}, fill_sum_permille{0};
};

// The CPU time one worker spends in one stage. Reading the thread's CPU clock is a system
// call (CLOCK_THREAD_CPUTIME_ID has no vDSO path: about 1.5 us in this VM, perf): measured
// twice per stage per sample it was a third of the pipeline's CPU for 1 KB raw samples
// (Kafka, 2 cores), and every 16th sample still 7 %. A stage whose last measured item cost
// at least kExactNs is measured on every item (the clock is then a few per cent of it); a
// cheaper one on every kEvery-th item, and the items between are charged that item's cost.
class CpuMeter {
 public:
  static constexpr int64_t kExactNs = 50'000;
  static constexpr int kEvery = 128;
  // Call before the stage's work; then Charge() after it.
  void Begin(const Clock* clock) {
    measure_ = last_ns_ >= kExactNs || ++skipped_ >= kEvery;
    if (measure_) c0_ = clock->ThreadCpuNanos();
  }
  // The CPU nanoseconds to add to the stage's counter for this item.
  int64_t Charge(const Clock* clock) {
    if (!measure_) return last_ns_;
    last_ns_ = clock->ThreadCpuNanos() - c0_;
    skipped_ = 0;
    return last_ns_;
  }

 private:
  int64_t last_ns_ = kExactNs;  // measure the first item
  int64_t c0_ = 0;
  int skipped_ = 0;
  bool measure_ = true;
};

// A worker's meters, one per stage it runs.
struct WorkerMeters {
  CpuMeter read, decode, augment;
};

struct BatchState;

// One sample on its way through the stages. `bs`/`slot` are its batch and place in it,
// looked up once at admission (the batch is reserved then and stays until it is complete).
struct Item {
  uint64_t pos = 0;    // position in this pass's order
  uint64_t index = 0;  // dataset index
  BatchState* bs = nullptr;
  int slot = 0;
  Sample sample;
  DecodedImage image;
  ResizePlan resize;  // the crop's box and filter window in decoded-image coordinates
  bool flip = false;
  int64_t label = -1;
};

}  // namespace stoker
