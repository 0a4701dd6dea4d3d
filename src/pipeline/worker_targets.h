// Internal to the executor: how many workers of each stage may run. Workers are spawned up
// to a stage's maximum once per pass and park while their id is at or past the stage's
// target; the tuner (and the per-epoch topology choice) moves the targets, which wakes the
// parked ones. The target is read lock-free on the hot path (Active) and under the mutex
// when a worker waits for it.
#pragma once

#include <algorithm>
#include <atomic>

#include "core/mutex.h"
#include "pipeline/stages.h"

namespace stoker {

class WorkerTargets {
 public:
  WorkerTargets() {
    for (auto& t : atomic_) t = 0;
  }

  // Before any worker runs: the stage's maximum (threads spawned) and first target.
  void Init(int stage, int max, int value) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    max_[stage] = max;
    target_[stage] = value;
    atomic_[stage] = value;
  }
  int max(int stage) const { return max_[stage]; }
  int target(int stage) const { return atomic_[stage].load(std::memory_order_relaxed); }
  bool Active(int stage, int id) const { return id < target(stage); }

  // Blocks until worker `id` of `stage` is active or `stop` is set; false when stopping.
  bool WaitActive(int stage, int id, const std::atomic<bool>& stop) EXCLUDES(mu_) {
    if (Active(stage, id)) return !stop;
    MutexLock l(&mu_);
    cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return stop.load() || id < target_[stage]; });
    return !stop;
  }

  // Sets the target, clamped to [1, max], and wakes the workers it activates.
  void Set(int stage, int n) EXCLUDES(mu_) {
    n = std::clamp(n, 1, std::max(1, max_[stage]));
    MutexLock l(&mu_);
    target_[stage] = n;
    atomic_[stage] = n;
    cv_.SignalAll();
  }

  // Wakes every parked worker (to see a stop flag).
  void WakeAll() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    cv_.SignalAll();
  }

 private:
  Mutex mu_;
  CondVar cv_;
  int target_[kNumStages] GUARDED_BY(mu_) = {1, 1, 0, 0};
  std::atomic<int> atomic_[kNumStages];
  int max_[kNumStages] = {1, 1, 0, 0};  // written by Init before the workers start
};

}  // namespace stoker
