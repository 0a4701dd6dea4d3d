#include "core/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <cmath>
#include <fstream>

namespace stoker {

ThreadPool::ThreadPool(int threads, std::string name) {
  if (threads < 1) threads = 1;
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, name, i] {
      SetThreadName(name + "-" + std::to_string(i));
      Loop();
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::Schedule(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    tasks_.push(std::move(fn));
  }
  cv_.notify_one();
}

void ThreadPool::Wait() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return tasks_.empty() && running_ == 0; });
}

void ThreadPool::Loop() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_ and drained
      fn = std::move(tasks_.front());
      tasks_.pop();
      ++running_;
    }
    fn();
    {
      std::lock_guard<std::mutex> lk(mu_);
      --running_;
      if (tasks_.empty() && running_ == 0) idle_cv_.notify_all();
    }
  }
}

void SetThreadName(const std::string& name) {
  std::string n = name.substr(0, 15);
  pthread_setname_np(pthread_self(), n.c_str());
}

int AvailableCpus() {
  int n = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
  // cgroup v2 quota
  std::ifstream f("/sys/fs/cgroup/cpu.max");
  std::string quota, period;
  if (f >> quota >> period && quota != "max") {
    double q = std::stod(quota), p = std::stod(period);
    if (p > 0) {
      int c = static_cast<int>(std::ceil(q / p));
      if (c > 0 && c < n) n = c;
    }
  }
  return n < 1 ? 1 : n;
}

}  // namespace stoker
