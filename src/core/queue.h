// A bounded blocking MPMC queue with close(): producers block when full, consumers
// when empty; Close() wakes everyone (Push then fails, Pop drains then fails).
// Its state is GUARDED_BY its mutex (checked by clang's -Wthread-safety in CI).
#pragma once

#include <cstddef>
#include <deque>
#include <optional>

#include "core/mutex.h"

namespace stoker {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : cap_(capacity == 0 ? 1 : capacity) {}

  // Blocks while full. Returns false if the queue was closed. Thread-safe.
  bool Push(T v) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    not_full_.Wait(&mu_, [&]() REQUIRES(mu_) { return closed_ || q_.size() < cap_; });
    if (closed_) return false;
    q_.push_back(std::move(v));
    not_empty_.Signal();
    return true;
  }

  // Blocks while empty. Returns nullopt once closed and drained. Thread-safe.
  std::optional<T> Pop() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    not_empty_.Wait(&mu_, [&]() REQUIRES(mu_) { return closed_ || !q_.empty(); });
    return TakeFront();
  }

  std::optional<T> TryPop() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return TakeFront();
  }

  void Close() EXCLUDES(mu_) {
    MutexLock l(&mu_);
    closed_ = true;
    not_full_.SignalAll();
    not_empty_.SignalAll();
  }

  void SetCapacity(size_t c) EXCLUDES(mu_) {
    MutexLock l(&mu_);
    cap_ = c == 0 ? 1 : c;
    not_full_.SignalAll();
  }

  size_t size() const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return q_.size();
  }
  size_t capacity() const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return cap_;
  }
  bool closed() const EXCLUDES(mu_) {
    MutexLock l(&mu_);
    return closed_;
  }

 private:
  std::optional<T> TakeFront() REQUIRES(mu_) {
    if (q_.empty()) return std::nullopt;
    T v = std::move(q_.front());
    q_.pop_front();
    not_full_.Signal();
    return v;
  }

  mutable Mutex mu_;
  CondVar not_full_, not_empty_;
  std::deque<T> q_ GUARDED_BY(mu_);
  size_t cap_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace stoker
