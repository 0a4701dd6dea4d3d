// A mutex, a scoped lock and a condition variable that clang's thread-safety analysis
// understands (std::mutex carries no annotations in libstdc++). Thin wrappers: the same
// cost as std::mutex / std::condition_variable.
//
//   Mutex mu_;
//   int n_ GUARDED_BY(mu_);
//   void Add() EXCLUDES(mu_) { MutexLock l(&mu_); ++n_; }
//   void Wait() { MutexLock l(&mu_); cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return n_ > 0; }); }
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "core/thread_annotations.h"

namespace stoker {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds the lock (where it cannot see it).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  // Atomically releases *mu, waits for a notification (or a spurious wake-up), relocks.
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu->mu_, std::adopt_lock);
    cv_.wait(lk);
    lk.release();
  }
  // Waits until pred() holds. pred runs with *mu held (annotate it REQUIRES(mu)). Callers
  // are checked (they must hold *mu); the body is not, since the analysis cannot tell that
  // `mu` is the lock the predicate names.
  template <typename Pred>
  void Wait(Mutex* mu, Pred pred) REQUIRES(mu) NO_THREAD_SAFETY_ANALYSIS {
    while (!pred()) Wait(mu);
  }
  // Waits at most `ns` nanoseconds of real time; false if it timed out.
  bool WaitForNanos(Mutex* mu, int64_t ns) REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu->mu_, std::adopt_lock);
    bool notified = cv_.wait_for(lk, std::chrono::nanoseconds(ns)) == std::cv_status::no_timeout;
    lk.release();
    return notified;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace stoker
