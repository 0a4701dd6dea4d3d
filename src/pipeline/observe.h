// Internal to the executor: the stage counters turned into what people and the tuner read.
//   SummarizeStages   counters -> PipelineStats' per-stage fractions and the bottleneck
//   TunerSampler      counters -> one AutotuneSnapshot per tuner period (deltas)
// Both are pure functions of the counters and the times they are given, so they are tested
// with scripted counters (observe_test.cc), without threads or a clock.
#pragma once

#include <atomic>
#include <cstdint>

#include "pipeline/autotune.h"
#include "pipeline/stages.h"
#include "pipeline/stats.h"

namespace stoker {

// What the consumer (the training loop calling Next()) did, lock-free.
struct ConsumerCounters {
  std::atomic<uint64_t> calls{0}, starved{0};   // Next() calls; those that found no batch ready
  std::atomic<int64_t> wait_ns{0}, busy_ns{0};  // blocked in Next(); between Next() calls
};

struct StageTopology {
  bool fused = false;  // read, decode and augment on the same threads
  int read_threads = 1;
  int compute_threads = 1;  // unused while fused
};

// Fills st->stages (read, decode, augment, batch), st->bottleneck, st->threads and the
// consumer's wait. Stages that run on the same threads share those threads' time: read,
// decode and augment when fused; decode and augment otherwise. Fractions are of the group's
// thread time (busy + waiting); the bottleneck is the busiest member of the busiest group, or
// "consumer" when the consumer hardly waits and the stages mostly wait on their output.
void SummarizeStages(const StageCounters (&sc)[kNumStages], const StageTopology& topo,
                     double wall_s, const ConsumerCounters& consumer, PipelineStats* st);

// The tuner's view: two thread groups, read (waits on storage) and compute (decode and
// augment, which run on the same threads). Each Take() returns what happened since the
// previous one.
class TunerSampler {
 public:
  TunerSampler(const StageCounters (&sc)[kNumStages], const ConsumerCounters& consumer,
               int64_t now_ns);
  AutotuneSnapshot Take(int64_t now_ns, int cpu_budget, int batch_size);
  int64_t last_ns() const { return last_ns_; }

 private:
  struct Totals {
    int64_t cpu = 0, wall = 0;
    uint64_t items = 0;
  };
  Totals Group(int g) const;

  const StageCounters (&sc_)[kNumStages];
  const ConsumerCounters& consumer_;
  int64_t last_ns_;
  Totals last_[2];
  uint64_t last_calls_, last_starved_;
  int64_t last_busy_;
};

}  // namespace stoker
