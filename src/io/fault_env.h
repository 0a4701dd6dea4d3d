// A fault-injecting Env for tests: deterministic EIO, short (truncated) reads, latency,
// reads that hang until released (a stuck NFS or FUSE mount), and read counters, matched
// by path substring.
#pragma once

#include <cstdint>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "io/env.h"

namespace stoker {

struct FaultRule {
  std::string path_contains;   // rule applies to paths containing this
  bool fail_open = false;      // NewRandomAccessFile returns IOError
  bool fail_read = false;      // every ReadAt returns IOError
  int64_t truncate_to = -1;    // file appears to be this many bytes long
  int64_t read_latency_us = 0; // sleep per ReadAt
  bool block = false;          // ReadAt hangs until ReleaseBlocked() (then reads normally)
  // Bytes per second of a link that every read under a rule with a bandwidth shares (one
  // link per env, first come first served): a read of n bytes holds it n / bandwidth
  // seconds. 0 = unlimited.
  int64_t bandwidth_bytes_per_s = 0;
};

class FaultInjectionEnv : public EnvWrapper {
 public:
  explicit FaultInjectionEnv(Env* target = Env::Default()) : EnvWrapper(target) {}
  void AddRule(FaultRule r) {
    std::lock_guard<std::mutex> lk(mu_);
    rules_.push_back(std::move(r));
  }
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path, const OpenOptions& opts = {}) override;

  // Blocked reads: how many are waiting now; wait until `n` are (false after `max_wait_s`
  // of real time, a safety net so a broken test fails instead of hanging); release them all
  // (and every later read of a blocking rule).
  int blocked() const;
  bool WaitUntilBlocked(int n, double max_wait_s = 60);
  void ReleaseBlocked();
  void BlockRead() const;  // for the files: waits while the env blocks
  // For the files: sleeps until `n` bytes have crossed the shared link.
  void UseLink(size_t n, int64_t bytes_per_s) const;

  std::atomic<int64_t> opens{0};
  std::atomic<int64_t> reads{0};
  std::atomic<int64_t> bytes_read{0};

 private:
  std::mutex mu_;
  std::vector<FaultRule> rules_;
  mutable std::mutex block_mu_;
  mutable std::condition_variable block_cv_;
  mutable int blocked_ = 0;
  bool released_ = false;
  mutable std::mutex link_mu_;
  mutable std::chrono::steady_clock::time_point link_free_{};
};

}  // namespace stoker
