// The storage context (storage/detail/context.hpp): a store's limit on requests in flight
// holds under many threads, and one store (place and options) is one set of resources.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "storage/detail/context.hpp"

namespace shardload {
namespace {

TEST(RequestSlots, NeverMoreInFlightThanTheLimit) {
  for (const std::size_t limit : {1u, 3u}) {
    detail::RequestSlots slots(limit);
    std::atomic<int> now{0};
    std::atomic<int> most{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int k = 0; k < 20; ++k) {
          const detail::RequestSlot slot(&slots);
          ASSERT_TRUE(slot.held());
          const int n = ++now;
          int m = most.load();
          while (n > m && !most.compare_exchange_weak(m, n)) {
          }
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          --now;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_LE(most.load(), static_cast<int>(limit));
    EXPECT_LE(slots.most_in_flight(), limit);
    EXPECT_EQ(slots.in_flight(), 0u);
  }
}

TEST(StorageContext, OneStoreOneLimitPerPlaceAndOptions) {
  auto& context = detail::StorageContext::process();
  StoreOptions a;
  a.max_requests = 3;
  StoreOptions b = a;
  b.max_requests = 5;
  const auto s1 = context.store("http://127.0.0.1:1", a);
  EXPECT_EQ(s1, context.store("http://127.0.0.1:1", a));
  EXPECT_NE(s1, context.store("http://127.0.0.1:2", a));
  const auto s2 = context.store("http://127.0.0.1:1", b);
  EXPECT_NE(s1, s2);
  EXPECT_EQ(s1->requests.limit(), 3u);
  EXPECT_EQ(s2->requests.limit(), 5u);
  EXPECT_EQ(StoreOptions{}.max_requests, 64);
}

}  // namespace
}  // namespace shardload
