#include "core/fault_guard.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <thread>

namespace stoker {
namespace {

// A page no one may read: reading it faults deterministically.
struct NoAccessPage {
  NoAccessPage() {
    size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  ~NoAccessPage() { munmap(p, size); }
  void* p;
  size_t size;
};

TEST(FaultGuard, ReturnsZeroWhenNothingFaults) {
  int x = 0;
  auto f = [&] { x = 42; };
  EXPECT_EQ(RunFaultGuarded(f), 0);
  EXPECT_EQ(x, 42);
}

TEST(FaultGuard, AFaultInsideBecomesItsSignalNumberAndTheThreadGoesOn) {
  NoAccessPage page;
  ASSERT_NE(page.p, MAP_FAILED);
  for (int i = 0; i < 3; ++i) {  // the handler stays armed after a fault
    volatile int sink = 0;
    auto f = [&] { sink = *static_cast<volatile const int*>(page.p); };
    EXPECT_EQ(RunFaultGuarded(f), SIGSEGV);
    (void)sink;
  }
  int y = 0;
  auto ok = [&] { y = 7; };
  EXPECT_EQ(RunFaultGuarded(ok), 0);
  EXPECT_EQ(y, 7);
}

TEST(FaultGuard, NestedGuardsAndOtherThreadsAreIndependent) {
  NoAccessPage page;
  ASSERT_NE(page.p, MAP_FAILED);
  int inner = -1;
  auto outer = [&] {
    auto f = [&] { (void)*static_cast<volatile const int*>(page.p); };
    inner = RunFaultGuarded(f);
  };
  EXPECT_EQ(RunFaultGuarded(outer), 0);  // the inner fault stayed inside the inner guard
  EXPECT_EQ(inner, SIGSEGV);
  int from_thread = -1;
  std::thread t([&] {
    auto f = [&] { (void)*static_cast<volatile const int*>(page.p); };
    from_thread = RunFaultGuarded(f);
  });
  t.join();
  EXPECT_EQ(from_thread, SIGSEGV);
}

}  // namespace
}  // namespace stoker
