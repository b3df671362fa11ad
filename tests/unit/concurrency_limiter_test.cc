#include "server/core/concurrency_limiter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace encoderd::server {
namespace {

TEST(ConcurrencyLimiterTest, AdmitsExactlyTheLimitAndReleasesOnDestruction) {
  ConcurrencyLimiter limiter(3);
  std::vector<ConcurrencyLimiter::Slot> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(limiter.TryAcquire());
    EXPECT_TRUE(held.back().held());
  }
  EXPECT_FALSE(limiter.TryAcquire().held());
  EXPECT_EQ(limiter.in_flight(), 3);
  held.pop_back();
  EXPECT_EQ(limiter.in_flight(), 2);
  EXPECT_TRUE(limiter.TryAcquire().held());  // released again at the end of the statement
  EXPECT_EQ(limiter.in_flight(), 2);
}

TEST(ConcurrencyLimiterTest, ConcurrentCallersNeverExceedTheLimit) {
  ConcurrencyLimiter limiter(4);
  std::atomic<int> inside{0}, peak{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto slot = limiter.TryAcquire();
        if (!slot.held()) {
          ++refused;
          continue;
        }
        const int now = ++inside;
        int seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        --inside;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), 4);
  EXPECT_EQ(limiter.in_flight(), 0);
}

}  // namespace
}  // namespace encoderd::server
