#include "core/queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace stoker {
namespace {

TEST(BoundedQueue, BlocksWhenFullAndDrainsAfterClose) {
  BoundedQueue<int> q(2);
  ASSERT_TRUE(q.Push(1));
  ASSERT_TRUE(q.Push(2));
  EXPECT_EQ(q.size(), 2u);
  std::thread producer([&] { EXPECT_TRUE(q.Push(3)); });  // blocks until a pop
  EXPECT_EQ(q.Pop().value(), 1);
  producer.join();
  q.Close();
  EXPECT_FALSE(q.Push(4));  // closed: refused
  EXPECT_EQ(q.Pop().value(), 2);  // drains what it holds
  EXPECT_EQ(q.TryPop().value(), 3);
  EXPECT_FALSE(q.Pop().has_value());
  EXPECT_TRUE(q.closed());
}

TEST(BoundedQueue, ManyProducersAndConsumersLoseAndRepeatNothing) {
  BoundedQueue<int> q(3);
  constexpr int kPer = 2000, kProducers = 3, kConsumers = 3;
  std::vector<std::thread> ts;
  std::vector<std::vector<int>> got(kConsumers);
  for (int c = 0; c < kConsumers; ++c)
    ts.emplace_back([&, c] {
      while (auto v = q.Pop()) got[c].push_back(*v);
    });
  std::vector<std::thread> ps;
  for (int p = 0; p < kProducers; ++p)
    ps.emplace_back([&, p] {
      for (int i = 0; i < kPer; ++i) ASSERT_TRUE(q.Push(p * kPer + i));
    });
  for (auto& t : ps) t.join();
  q.Close();
  for (auto& t : ts) t.join();
  std::vector<int> all;
  for (auto& g : got) all.insert(all.end(), g.begin(), g.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), size_t(kPer * kProducers));
  for (int i = 0; i < kPer * kProducers; ++i) ASSERT_EQ(all[i], i);
}

}  // namespace
}  // namespace stoker
