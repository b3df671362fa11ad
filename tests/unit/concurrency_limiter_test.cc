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

// The scrape-time gauges: the calls in progress and the places among the
// answers being sent, each summed over its own kind of limiter.
TEST(ConcurrencyLimiterTest, EachKindHasItsOwnProcessCount) {
  using Kind = ConcurrencyLimiter::Kind;
  for (const bool fair : {false, true}) {
    ConcurrencyLimiter slots(2, fair), sending(2, fair, Kind::kAnswersSending);
    const int64_t calls0 = ConcurrencyLimiter::HeldInProcess(Kind::kCalls);
    const int64_t sending0 = ConcurrencyLimiter::HeldInProcess(Kind::kAnswersSending);
    {
      auto slot = slots.TryAcquire(1);
      auto place = sending.TryAcquire(1);
      auto other = sending.TryAcquire(2);
      ASSERT_TRUE(slot.held() && place.held() && other.held());
      EXPECT_EQ(ConcurrencyLimiter::HeldInProcess(Kind::kCalls), calls0 + 1);
      EXPECT_EQ(ConcurrencyLimiter::HeldInProcess(Kind::kAnswersSending), sending0 + 2);
    }
    EXPECT_EQ(ConcurrencyLimiter::HeldInProcess(Kind::kCalls), calls0);
    EXPECT_EQ(ConcurrencyLimiter::HeldInProcess(Kind::kAnswersSending), sending0);
  }
}

TEST(ConcurrencyLimiterTest, ConcurrentCallersNeverExceedTheLimit) {
  for (const bool fair : {false, true}) {
    ConcurrencyLimiter limiter(4, fair);
    std::atomic<int> inside{0}, peak{0}, refused{0}, admitted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, peer = static_cast<uint64_t>(t % 3)] {
        for (int i = 0; i < 2000; ++i) {
          auto slot = limiter.TryAcquire(peer);
          if (!slot.held()) {
            ++refused;
            continue;
          }
          ++admitted;
          const int now = ++inside;
          int seen = peak.load();
          while (now > seen && !peak.compare_exchange_weak(seen, now)) {
          }
          --inside;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_GT(admitted.load(), 0);  // a limiter refusing everything passes no other check
    EXPECT_LE(peak.load(), 4);
    EXPECT_EQ(limiter.in_flight(), 0);
  }
}

// Fair sharing, 8 slots: peer 1 alone takes 6 (three quarters); peer 2 then
// gets the other two; peer 1 gets none back while over its share of 8/3.
TEST(ConcurrencyLimiterTest, AFloodingPeerLeavesTheLastQuarterToOthers) {
  ConcurrencyLimiter limiter(8, /*fair_share=*/true);
  std::vector<ConcurrencyLimiter::Slot> one, two;
  for (int i = 0; i < 6; ++i) one.push_back(limiter.TryAcquire(1));
  for (const auto& s : one) EXPECT_TRUE(s.held());
  EXPECT_FALSE(limiter.TryAcquire(1).held());
  two.push_back(limiter.TryAcquire(2));
  two.push_back(limiter.TryAcquire(2));
  EXPECT_TRUE(two[0].held());
  EXPECT_TRUE(two[1].held());
  EXPECT_FALSE(limiter.TryAcquire(3).held());  // all 8 held
  EXPECT_EQ(limiter.in_flight(), 8);
  two.pop_back();
  // Peer 1 (6 held, share 8/3) still may not; peer 2 (1 held) may.
  EXPECT_FALSE(limiter.TryAcquire(1).held());
  EXPECT_TRUE(limiter.TryAcquire(2).held());
  one.clear();
  two.clear();
  EXPECT_EQ(limiter.in_flight(), 0);
  // Without fair sharing, one peer takes all 8.
  ConcurrencyLimiter plain(8);
  std::vector<ConcurrencyLimiter::Slot> all;
  for (int i = 0; i < 8; ++i) all.push_back(plain.TryAcquire(1));
  for (const auto& s : all) EXPECT_TRUE(s.held());
}

// Below three quarters there is no share (30 peers take 2 slots each), and a
// peer holding none always gets a free slot (40 more take the rest).
TEST(ConcurrencyLimiterTest, SharesOnlyBindInTheLastQuarter) {
  ConcurrencyLimiter limiter(100, /*fair_share=*/true);
  std::vector<ConcurrencyLimiter::Slot> held;
  for (uint64_t peer = 0; peer < 30; ++peer) {
    held.push_back(limiter.TryAcquire(peer));
    held.push_back(limiter.TryAcquire(peer));
  }
  for (uint64_t peer = 30; peer < 70; ++peer) held.push_back(limiter.TryAcquire(peer));
  for (const auto& s : held) EXPECT_TRUE(s.held());
  EXPECT_EQ(limiter.in_flight(), 100);
}

}  // namespace
}  // namespace encoderd::server
