// Injected clock: metrics, the autotuner and trace analysis take a Clock so that
// tests use a FakeClock and never sleep.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace stoker {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds. Thread-safe.
  virtual int64_t NowNanos() const = 0;
  double NowSeconds() const { return static_cast<double>(NowNanos()) * 1e-9; }
  static Clock* Real();
};

class RealClock final : public Clock {
 public:
  int64_t NowNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

inline Clock* Clock::Real() {
  static RealClock clock;
  return &clock;
}

// A clock that only moves when told to. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ns = 0) : now_(start_ns) {}
  int64_t NowNanos() const override { return now_.load(std::memory_order_relaxed); }
  void AdvanceNanos(int64_t d) { now_.fetch_add(d, std::memory_order_relaxed); }
  void AdvanceMillis(double ms) { AdvanceNanos(static_cast<int64_t>(ms * 1e6)); }
  void SetNanos(int64_t t) { now_.store(t, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace stoker
