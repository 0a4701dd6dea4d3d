#include "pipeline/batch_pool.h"

#include <cstdint>
#include <fmt/format.h>

namespace stoker {

BatchPool::~BatchPool() = default;

BatchPtr BatchPool::Get() {
  std::unique_ptr<Entry> e;
  std::string warning;
  {
    MutexLock l(&mu_);
    if (!free_.empty()) {
      e = std::move(free_.back());
      free_.pop_back();
    } else {
      ++allocated_;
      if (allocated_ > budget_ && !warned_) {
        warned_ = true;
        warning = fmt::format(
            "the consumer holds more batches than the pipeline's pool of {} (the admission "
            "window plus 2): {} batch buffers of {:.1f} MB allocated now, {} past the budget; "
            "they are freed as they are released (this is said once)",
            budget_, allocated_, bytes_ / 1e6, allocated_ - budget_);
      }
    }
  }
  if (!warning.empty() && warn_) warn_(warning);
  if (!e) {
    e = std::make_unique<Entry>();
    if (bytes_ > 0) e->buf = HostBuffer(alloc_, bytes_);
  }
  Entry* raw = e.release();
  raw->batch.images = raw->buf.data();
  std::weak_ptr<BatchPool> weak = shared_from_this();
  return BatchPtr(&raw->batch, [weak, raw](Batch*) {
    if (auto pool = weak.lock()) {
      pool->Put(raw);
    } else {
      delete raw;
    }
  });
}

void BatchPool::Put(Entry* raw) {
  std::unique_ptr<Entry> e(raw);
  {
    MutexLock l(&mu_);
    if (allocated_ <= budget_) {
      free_.push_back(std::move(e));
      return;
    }
    --allocated_;  // past the budget: this buffer goes (freed outside the lock)
  }
}

void BatchPool::SetBudget(int batches) {
  std::vector<std::unique_ptr<Entry>> drop;
  {
    MutexLock l(&mu_);
    budget_ = batches < 1 ? 1 : batches;
    while (allocated_ > budget_ && !free_.empty()) {
      drop.push_back(std::move(free_.back()));
      free_.pop_back();
      --allocated_;
    }
  }
}

int BatchPool::budget() const {
  MutexLock l(&mu_);
  return budget_;
}
int BatchPool::allocated() const {
  MutexLock l(&mu_);
  return allocated_;
}
int BatchPool::idle() const {
  MutexLock l(&mu_);
  return static_cast<int>(free_.size());
}
int64_t BatchPool::allocated_bytes() const {
  MutexLock l(&mu_);
  return static_cast<int64_t>(allocated_) * static_cast<int64_t>(bytes_);
}

}  // namespace stoker
