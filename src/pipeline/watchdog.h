// Internal to the executor: what each worker is doing right now, for the stall watchdog.
// A worker marks the start and end of each stage on a sample (three relaxed atomic stores
// each, nothing locked); the watchdog reads the board when the consumer has waited too
// long and names, per busy worker, the stage, the sample and how long it has been at it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace stoker {

class ActivityBoard {
 public:
  explicit ActivityBoard(int workers)
      : n_(workers), slots_(std::make_unique<Slot[]>(static_cast<size_t>(workers))) {}
  void Begin(int worker, int stage, uint64_t index, int64_t now_ns) {
    Slot& s = slots_[worker];
    s.index.store(index, std::memory_order_relaxed);
    s.since.store(now_ns, std::memory_order_relaxed);
    s.stage.store(stage, std::memory_order_release);
  }
  void End(int worker) { slots_[worker].stage.store(-1, std::memory_order_release); }

  struct Entry {
    int worker = 0;
    int stage = 0;
    uint64_t index = 0;
    int64_t since_ns = 0;
  };
  // Busy workers, in worker order.
  std::vector<Entry> Busy() const {
    std::vector<Entry> out;
    for (int i = 0; i < n_; ++i) {
      const Slot& s = slots_[i];
      int stage = s.stage.load(std::memory_order_acquire);
      if (stage < 0) continue;
      out.push_back({i, stage, s.index.load(std::memory_order_relaxed),
                     s.since.load(std::memory_order_relaxed)});
    }
    return out;
  }
  int size() const { return n_; }

 private:
  struct Slot {
    std::atomic<int> stage{-1};
    std::atomic<uint64_t> index{0};
    std::atomic<int64_t> since{0};
  };
  int n_;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace stoker
