// Internal to the executor: stage ids, per-stage counters, and the work item a sample is
// carried in from admission to its batch slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "codec/image.h"
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
