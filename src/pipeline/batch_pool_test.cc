#include "pipeline/batch_pool.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <vector>

namespace stoker {
namespace {

TEST(BatchPool, RecyclesWithinTheBudget) {
  std::vector<std::string> warnings;
  auto pool = std::make_shared<BatchPool>(HostAllocator::Default(), 4096, 3,
                                          [&](const std::string& m) { warnings.push_back(m); });
  for (int round = 0; round < 5; ++round) {
    BatchPtr a = pool->Get(), b = pool->Get(), c = pool->Get();
    ASSERT_NE(a->images, nullptr);
    EXPECT_NE(a->images, b->images);
  }
  EXPECT_EQ(pool->allocated(), 3);
  EXPECT_EQ(pool->idle(), 3);
  EXPECT_EQ(pool->allocated_bytes(), 3 * 4096);
  EXPECT_TRUE(warnings.empty());
}

// A consumer holding N + k batches gets them (no blocking), one warning names the count,
// and the pool is back to N once they are released.
TEST(BatchPool, GrowsPastItsBudgetWithOneWarningAndShrinksBack) {
  std::vector<std::string> warnings;
  const int n = 4, k = 5;
  auto pool = std::make_shared<BatchPool>(HostAllocator::Default(), 1000, n,
                                          [&](const std::string& m) { warnings.push_back(m); });
  std::vector<BatchPtr> held;
  for (int i = 0; i < n + k; ++i) held.push_back(pool->Get());
  EXPECT_EQ(pool->allocated(), n + k);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("pool of 4"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("5 batch buffers"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("1 past the budget"), std::string::npos) << warnings[0];
  held.clear();
  EXPECT_EQ(pool->allocated(), n);
  EXPECT_EQ(pool->idle(), n);
  // Holding too many again allocates again, without a second warning.
  for (int i = 0; i < n + 2; ++i) held.push_back(pool->Get());
  EXPECT_EQ(pool->allocated(), n + 2);
  EXPECT_EQ(warnings.size(), 1u);
  held.clear();
  EXPECT_EQ(pool->allocated(), n);
}

TEST(BatchPool, ABudgetCutFreesIdleBuffersAndBatchesOutliveThePool) {
  auto pool = std::make_shared<BatchPool>(HostAllocator::Default(), 64, 6, nullptr);
  std::vector<BatchPtr> held;
  for (int i = 0; i < 6; ++i) held.push_back(pool->Get());
  held.resize(2);
  EXPECT_EQ(pool->idle(), 4);
  pool->SetBudget(3);
  EXPECT_EQ(pool->allocated(), 3);  // 2 held + 1 idle
  held.push_back(pool->Get());
  pool.reset();  // the held batches stay valid and free themselves
  for (auto& b : held) static_cast<uint8_t*>(b->images)[63] = 1;
}

}  // namespace
}  // namespace stoker
