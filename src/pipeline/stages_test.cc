#include "pipeline/stages.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

// Runs `items` items through a meter on a FakeClock whose every thread-CPU read advances
// by `step` ns (each measured item costs exactly `step`); returns the CPU charged and sets
// *reads to how many times the clock was read.
int64_t Charge(int64_t step, int items, int64_t* reads) {
  FakeClock clock;
  clock.SetThreadCpuStep(step);
  CpuMeter m;
  int64_t charged = 0;
  for (int i = 0; i < items; ++i) {
    m.Begin(&clock);
    charged += m.Charge(&clock);
  }
  *reads = clock.ThreadCpuNanos() / step;  // the reads so far (this one not counted)
  return charged;
}

TEST(CpuMeter, CheapItemsAreMeasuredOnceInKEveryAndChargedTheMeasuredCost) {
  int64_t reads = 0;
  const int items = 100 * CpuMeter::kEvery;
  EXPECT_EQ(Charge(1000, items, &reads), int64_t(items) * 1000);
  // The first item, then one in kEvery: two reads each.
  EXPECT_EQ(reads, 2 * (1 + (items - 1) / CpuMeter::kEvery));
}

TEST(CpuMeter, CostlyItemsAreMeasuredEveryTime) {
  int64_t reads = 0;
  EXPECT_EQ(Charge(CpuMeter::kExactNs, 300, &reads), 300 * CpuMeter::kExactNs);
  EXPECT_EQ(reads, 600);
}

}  // namespace
}  // namespace stoker
