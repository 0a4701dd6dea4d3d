// Injected clock: metrics, the autotuner and trace analysis take a Clock so that
// tests use a FakeClock and never sleep. Both wall time and the calling thread's CPU time
// come from it, so a test on a FakeClock controls every number the autotuner sees.
#pragma once

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace stoker {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds. Thread-safe.
  virtual int64_t NowNanos() const = 0;
  double NowSeconds() const { return static_cast<double>(NowNanos()) * 1e-9; }
  // CPU time the calling thread has used, in nanoseconds. Thread-safe.
  virtual int64_t ThreadCpuNanos() const = 0;
  static Clock* Real();
};

class RealClock final : public Clock {
 public:
  int64_t NowNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  int64_t ThreadCpuNanos() const override {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
  }
};

inline Clock* Clock::Real() {
  static RealClock clock;
  return &clock;
}

// A clock that only moves when told to. Thread-safe.
// Thread CPU time: each thread has its own counter, which every ThreadCpuNanos() call on
// that thread advances by `cpu_step` (0 by default: no CPU is ever used). So a piece of
// work measured as the difference of two calls costs exactly `cpu_step`, whatever the
// machine's load: a scripted per-item cost for tests of the executor.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ns = 0) : now_(start_ns) {}
  int64_t NowNanos() const override { return now_.load(std::memory_order_relaxed); }
  int64_t ThreadCpuNanos() const override {
    std::lock_guard<std::mutex> lk(cpu_mu_);
    int64_t& t = cpu_[std::this_thread::get_id()];
    int64_t v = t;
    t += cpu_step_.load(std::memory_order_relaxed);
    return v;
  }
  void SetThreadCpuStep(int64_t ns) { cpu_step_.store(ns, std::memory_order_relaxed); }
  void AdvanceNanos(int64_t d) { now_.fetch_add(d, std::memory_order_relaxed); }
  void AdvanceMillis(double ms) { AdvanceNanos(static_cast<int64_t>(ms * 1e6)); }
  void SetNanos(int64_t t) { now_.store(t, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
  std::atomic<int64_t> cpu_step_{0};
  mutable std::mutex cpu_mu_;
  mutable std::unordered_map<std::thread::id, int64_t> cpu_;
};

}  // namespace stoker
