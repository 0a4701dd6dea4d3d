// A small fixed-size thread pool: move-only tasks, join in the destructor.
// Used for parallel one-off work (conversion, benches); the pipeline runs its own
// stage workers (see pipeline/executor.h).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

namespace stoker {

class ThreadPool {
 public:
  explicit ThreadPool(int threads, std::string name = "stoker-pool");
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Thread-safe.
  void Schedule(std::function<void()> fn);
  // Blocks until every scheduled task has finished.
  void Wait();
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::queue<std::function<void()>> tasks_;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Names the calling thread (visible in top/perf/gdb); at most 15 characters are kept.
void SetThreadName(const std::string& name);

// Number of CPUs this process may run on (sched_getaffinity, then cgroup quota).
int AvailableCpus();

}  // namespace stoker
