// The autotuner: a small pure model in the shape of tf.data's (framework/model.h,
// prefetch_autotuner.h). Each period the executor hands it a snapshot of what every stage
// did (items, CPU time, wall time), the CPU and memory budgets and what the consumer saw;
// it returns thread counts per stage and the prefetch depth. No clocks, no threads: tests
// feed scripted observations and check the knobs after each step.
//
// Threads: the steady-state throughput the CPU budget allows is X = budget / sum(cpu per
// item). A CPU stage needs X * cpu_s threads; the read stage also waits on storage, so it
// gets X * wall_s threads (its I/O wait does not use the CPU budget), up to max_io_threads.
// Each count is rounded up (with a small tolerance) and at least 1. Costs are smoothed
// (EMA) so one noisy period does not move threads.
// Prefetch: tf.data's rule: if the consumer found the next batch not ready in more than
// `starve_tolerance` of its calls while the pipeline as a whole is fast enough for it (its
// capacity exceeds the consumer's demand, so the waits are jitter, not throughput), double
// the depth, within the memory budget. Depth never shrinks (memory is already paid for).
// Topology (threads=auto, decided at each epoch start from the last epoch): if reading a
// sample took less than a tenth of its compute, fused workers (one per compute thread, no
// hand-off); otherwise read threads in front of compute threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker {

struct TunableInt {
  int min = 1, max = 1, value = 1;
  bool autotune = false;  // false: fixed by the user
};

struct StageObservation {
  std::string name;
  bool io_stage = false;   // waits on storage (read)
  uint64_t items = 0;      // in this period
  double cpu_s = 0;        // thread CPU time spent on those items
  double wall_s = 0;       // wall time spent on those items
};

struct AutotuneSnapshot {
  std::vector<StageObservation> stages;
  double period_s = 0;
  int cpu_budget = 1;
  // Consumer: Next() calls in the period, how many found the batch not ready, and the
  // time it spent outside Next() (its own work, e.g. the training step).
  uint64_t consumer_calls = 0;
  uint64_t consumer_starved_calls = 0;
  double consumer_busy_s = 0;
  int batch_size = 1;
};

// What the executor saw since the previous epoch start.
struct TopologyObservation {
  int epoch = 0;               // the epoch about to start
  uint64_t read_items = 0;     // samples read
  double read_wall_s = 0;      // wall time the read stage spent on them
  uint64_t compute_items = 0;  // samples decoded
  double compute_cpu_s = 0;    // CPU time decode + augment spent on them
  bool fused = false;          // the topology of the epoch that ended
  int read_threads = 1;        // its thread counts
  int compute_threads = 1;
};

struct TopologyDecision {
  bool changed = false;
  bool fused = false;
  int read_threads = 1;     // fused: the fused workers
  int compute_threads = 1;  // the compute threads (unused while fused)
  std::string reason;       // set when changed
};

class Autotuner {
 public:
  Autotuner(std::vector<TunableInt> threads, TunableInt prefetch, int max_io_threads = 16);
  // Takes one period's observations; returns true if any knob changed. `reasons` gets a
  // line per change ("decode threads 1 -> 2 (cpu 1.10 ms/item)").
  bool Step(const AutotuneSnapshot& snap, std::vector<std::string>* reasons);
  int threads(size_t stage) const { return threads_[stage].value; }
  int prefetch() const { return prefetch_.value; }
  // Estimated samples/s the CPU budget allows with the current cost estimates.
  double capacity() const { return capacity_; }
  double cost_cpu(size_t stage) const { return cpu_ema_[stage]; }
  // The topology for the next epoch. Pure: reads only `o` and the read group's current
  // thread count (threads(0)), which a return to read threads restores. Too few samples
  // seen (< 16 in either group) keeps the topology.
  TopologyDecision ChooseTopology(const TopologyObservation& o) const;

 private:
  std::vector<TunableInt> threads_;
  TunableInt prefetch_;
  int max_io_threads_;
  std::vector<double> cpu_ema_, wall_ema_;
  std::vector<bool> seen_;
  double capacity_ = 0;
};

}  // namespace stoker
