#include "core/allocator.h"

#include <sys/mman.h>

#include <cstdlib>

namespace stoker {
namespace {

class HugePageAllocator final : public HostAllocator {
 public:
  void* Allocate(size_t bytes) override {
    if (bytes == 0) bytes = 1;
    constexpr size_t kAlign = 2u << 20;
    size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (p && rounded >= kAlign) ::madvise(p, rounded, MADV_HUGEPAGE);
    return p;
  }
  void Free(void* p, size_t) override { std::free(p); }
  std::string name() const override { return "hugepage"; }
};

}  // namespace

HostAllocator* HostAllocator::Default() {
  static HugePageAllocator a;
  return &a;
}

}  // namespace stoker
