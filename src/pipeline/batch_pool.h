// The batch pool: recycles Batch objects and their image buffers. Its budget is the number
// of batches the executor needs (the admission window plus the consumer's two: the batch
// it uses and the one it just received). A consumer that holds more (gradient
// accumulation, list(loader)) never blocks the pipeline: the pool allocates past its
// budget, says so once through `warn` (with the count), and frees the extra buffers as
// they come back, so it shrinks to the budget again. Shared with the BatchPtr deleters, so
// a batch may outlive the pipeline. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/mutex.h"
#include "pipeline/pipeline.h"

namespace stoker {

class BatchPool : public std::enable_shared_from_this<BatchPool> {
 public:
  using Warn = std::function<void(const std::string&)>;
  BatchPool(HostAllocator* alloc, size_t bytes, int budget, Warn warn)
      : alloc_(alloc), bytes_(bytes), budget_(budget < 1 ? 1 : budget), warn_(std::move(warn)) {}
  ~BatchPool();

  // A batch from the free list, or a freshly allocated one. Never blocks.
  BatchPtr Get() EXCLUDES(mu_);
  // Changes the budget (prefetch changed); frees idle buffers above it.
  void SetBudget(int batches) EXCLUDES(mu_);

  int budget() const EXCLUDES(mu_);
  int allocated() const EXCLUDES(mu_);  // buffers alive: idle + handed out
  int idle() const EXCLUDES(mu_);
  int64_t allocated_bytes() const EXCLUDES(mu_);
  bool alloc_failed(const BatchPtr& b) const { return bytes_ > 0 && b->images == nullptr; }

 private:
  struct Entry {
    Batch batch;
    HostBuffer buf;
  };
  void Put(Entry* e) EXCLUDES(mu_);

  HostAllocator* const alloc_;
  const size_t bytes_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Entry>> free_ GUARDED_BY(mu_);
  int allocated_ GUARDED_BY(mu_) = 0;
  int budget_ GUARDED_BY(mu_);
  bool warned_ GUARDED_BY(mu_) = false;
  const Warn warn_;
};

}  // namespace stoker
