// A fault-injecting Env for tests: deterministic EIO, short (truncated) reads, latency,
// and read counters, matched by path substring.
#pragma once

#include <atomic>
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

  std::atomic<int64_t> opens{0};
  std::atomic<int64_t> reads{0};
  std::atomic<int64_t> bytes_read{0};

 private:
  std::mutex mu_;
  std::vector<FaultRule> rules_;
};

}  // namespace stoker
