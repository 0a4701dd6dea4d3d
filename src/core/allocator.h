// Host memory for large, long-lived buffers (batches). The default allocator returns
// 2 MiB-aligned memory with MADV_HUGEPAGE, because on our VMs the first touch of a fresh
// 4 KiB page costs ~12 us (a 154 MB float batch is ~38,000 pages). A pinned (page-locked)
// allocator for CUDA can be plugged in (see pipeline/cuda.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace stoker {

class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  // Returns nullptr on failure. Thread-safe.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* p, size_t bytes) = 0;
  virtual std::string name() const = 0;
  virtual bool pinned() const { return false; }
  static HostAllocator* Default();
};

// Frees with the allocator it came from.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostAllocator* a, size_t n) : alloc_(a), size_(n), p_(a->Allocate(n)) {
    if (!p_) size_ = 0;
  }
  ~HostBuffer() { reset(); }
  HostBuffer(HostBuffer&& o) noexcept { *this = std::move(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      alloc_ = o.alloc_;
      size_ = o.size_;
      p_ = o.p_;
      o.p_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }
  void reset() {
    if (p_) alloc_->Free(p_, size_);
    p_ = nullptr;
    size_ = 0;
  }
  void* data() const { return p_; }
  size_t size() const { return size_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  HostAllocator* alloc_ = nullptr;
  size_t size_ = 0;
  void* p_ = nullptr;
};

}  // namespace stoker
