#include "pipeline/autotune.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace stoker {

Autotuner::Autotuner(std::vector<TunableInt> threads, TunableInt prefetch, int max_io_threads)
    : threads_(std::move(threads)),
      prefetch_(prefetch),
      max_io_threads_(max_io_threads),
      cpu_ema_(threads_.size(), 0),
      wall_ema_(threads_.size(), 0),
      seen_(threads_.size(), false) {}

bool Autotuner::Step(const AutotuneSnapshot& snap, std::vector<std::string>* reasons) {
  constexpr double kAlpha = 0.5;  // EMA weight of the newest period
  const size_t n = std::min(threads_.size(), snap.stages.size());
  for (size_t i = 0; i < n; ++i) {
    const auto& o = snap.stages[i];
    if (o.items == 0) continue;
    double cpu = o.cpu_s / o.items, wall = o.wall_s / o.items;
    if (!seen_[i]) {
      cpu_ema_[i] = cpu;
      wall_ema_[i] = wall;
      seen_[i] = true;
    } else {
      cpu_ema_[i] = kAlpha * cpu + (1 - kAlpha) * cpu_ema_[i];
      wall_ema_[i] = kAlpha * wall + (1 - kAlpha) * wall_ema_[i];
    }
  }
  bool changed = false;
  double total_cpu = 0;
  bool all_seen = true;
  for (size_t i = 0; i < n; ++i) {
    total_cpu += cpu_ema_[i];
    all_seen = all_seen && seen_[i];
  }
  if (all_seen && total_cpu > 0) {
    capacity_ = snap.cpu_budget / total_cpu;
    for (size_t i = 0; i < n; ++i) {
      TunableInt& t = threads_[i];
      if (!t.autotune) continue;
      const auto& o = snap.stages[i];
      double need;
      int cap = t.max;
      if (o.io_stage) {
        need = capacity_ * std::max(wall_ema_[i], cpu_ema_[i]);
        cap = std::min(cap, max_io_threads_);
      } else {
        need = capacity_ * cpu_ema_[i];
      }
      int want = static_cast<int>(std::ceil(need - 0.15));
      want = std::clamp(want, std::max(1, t.min), std::max(1, cap));
      // Hysteresis: only move when the model asks for a different count two periods
      // in a row would be nicer; a tolerance on the fractional part does most of it.
      if (want != t.value) {
        if (reasons)
          reasons->push_back(fmt::format("{} threads {} -> {} (cpu {:.3f} ms/item, need {:.2f})",
                                         o.name, t.value, want, cpu_ema_[i] * 1e3, need));
        t.value = want;
        changed = true;
      }
    }
  }
  if (prefetch_.autotune && snap.consumer_calls > 0) {
    double starved = static_cast<double>(snap.consumer_starved_calls) / snap.consumer_calls;
    double demand = snap.consumer_busy_s > 0
                        ? snap.consumer_calls * snap.batch_size / snap.consumer_busy_s
                        : 1e300;  // a consumer that does no work wants everything
    bool jitter = capacity_ > 0 && capacity_ >= demand;
    if (starved > 0.1 && jitter && prefetch_.value < prefetch_.max) {
      int want = std::min(prefetch_.max, prefetch_.value * 2);
      if (reasons)
        reasons->push_back(fmt::format(
            "prefetch {} -> {} (consumer waited in {:.0f}% of calls; capacity {:.0f}/s >= "
            "demand {:.0f}/s)",
            prefetch_.value, want, starved * 100, capacity_, demand));
      prefetch_.value = want;
      changed = true;
    }
  }
  return changed;
}

TopologyDecision Autotuner::ChooseTopology(const TopologyObservation& o) const {
  TopologyDecision d;
  d.fused = o.fused;
  d.read_threads = o.read_threads;
  d.compute_threads = o.compute_threads;
  double read_per = o.read_items ? o.read_wall_s / o.read_items : 0;
  double cpu_per = o.compute_items ? o.compute_cpu_s / o.compute_items : 0;
  if (o.read_items < 16 || o.compute_items < 16 || cpu_per <= 0) return d;
  bool fast_reads = read_per < 0.1 * cpu_per;
  if (fast_reads == o.fused) return d;
  int compute = std::max(1, o.fused ? o.read_threads : o.compute_threads);
  d.changed = true;
  d.fused = fast_reads;
  d.read_threads = d.fused ? compute : std::max(1, threads_.empty() ? 1 : threads_[0].value);
  d.compute_threads = compute;
  d.reason = fmt::format("epoch {}: a read took {:.3f} ms, {:.0f}% of a sample's compute: {}",
                         o.epoch, read_per * 1e3, 100 * read_per / cpu_per,
                         d.fused ? fmt::format("{} fused workers", compute)
                                 : "read threads in front of compute threads again");
  return d;
}

}  // namespace stoker
