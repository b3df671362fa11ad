// ArrivalProcess: Poisson arrivals hit the rate and have exponential gaps.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "loadtest/arrival_process.h"

namespace encoderd::loadtest {
namespace {

constexpr int kArrivals = 10'000;

TEST(LoadtestArrivalTest, PoissonRateWithinTwoPercent) {
  for (double rate : {50.0, 1000.0, 25000.0}) {
    for (uint64_t seed : {1, 2, 3}) {
      ArrivalProcess arrivals(ArrivalKind::kPoisson, rate, seed);
      int64_t last = 0;
      for (int i = 0; i < kArrivals; ++i) last = arrivals.NextOffsetNanos();
      const double achieved = kArrivals / (static_cast<double>(last) * 1e-9);
      EXPECT_NEAR(achieved, rate, 0.02 * rate) << "seed " << seed;
    }
  }
}

TEST(LoadtestArrivalTest, PoissonGapsAreExponential) {
  const double rate = 400;
  ArrivalProcess arrivals(ArrivalKind::kPoisson, rate, 42);
  std::vector<double> gaps(kArrivals);
  for (auto& g : gaps) g = arrivals.NextGapSeconds();
  std::sort(gaps.begin(), gaps.end());
  // Kolmogorov-Smirnov distance to Exp(rate); 1.63 / sqrt(n) is the 1% level.
  double d = 0;
  for (int i = 0; i < kArrivals; ++i) {
    const double cdf = 1 - std::exp(-rate * gaps[i]);
    d = std::max({d, cdf - static_cast<double>(i) / kArrivals,
                  static_cast<double>(i + 1) / kArrivals - cdf});
  }
  EXPECT_LT(d, 1.63 / std::sqrt(kArrivals));
  // Memorylessness shows as a coefficient of variation of 1.
  double sum = 0, sum_sq = 0;
  for (double g : gaps) {
    sum += g;
    sum_sq += g * g;
  }
  const double mean = sum / kArrivals;
  const double cv = std::sqrt(sum_sq / kArrivals - mean * mean) / mean;
  EXPECT_NEAR(cv, 1.0, 0.05);
}

TEST(LoadtestArrivalTest, UniformGapsAreConstantAndDoNotDrift) {
  ArrivalProcess arrivals(ArrivalKind::kUniform, 3000, 1);
  int64_t last = 0;
  for (int i = 0; i < kArrivals; ++i) last = arrivals.NextOffsetNanos();
  // 10,000 gaps of 1/3000 s: 3.333... s, within a nanosecond.
  EXPECT_NEAR(static_cast<double>(last), 1e9 * kArrivals / 3000.0, 1.0);
}

TEST(LoadtestArrivalTest, SameSeedSameArrivals) {
  ArrivalProcess a(ArrivalKind::kPoisson, 100, 9), b(ArrivalKind::kPoisson, 100, 9),
      c(ArrivalKind::kPoisson, 100, 10);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const int64_t x = a.NextOffsetNanos();
    EXPECT_EQ(x, b.NextOffsetNanos());
    differs |= x != c.NextOffsetNanos();
  }
  EXPECT_TRUE(differs);
}

TEST(LoadtestArrivalTest, DeadlineRunsFromTheIntendedSendTime) {
  using std::chrono::milliseconds;
  const auto sent_at = std::chrono::system_clock::time_point() + std::chrono::hours(1);
  // Sent on time: the whole timeout from the send.
  EXPECT_EQ(DeadlineFromIntended(5'000'000, 5'000'000, 100, sent_at), sent_at + milliseconds(100));
  // Sent 3 ms late: 97 ms left (it had 100 ms from the send).
  EXPECT_EQ(DeadlineFromIntended(5'000'000, 8'000'000, 100, sent_at), sent_at + milliseconds(97));
  // A send time before the intended one (not made by the runner, which
  // claims a call before sending it) gives no credit.
  EXPECT_EQ(DeadlineFromIntended(8'000'000, 5'000'000, 100, sent_at), sent_at + milliseconds(100));
}

TEST(LoadtestArrivalTest, FarOffsetsSaturateInsteadOfOverflowing) {
  // A gap of 10^12 s is 10^21 ns: llround overflowed, and the run slept 292
  // years. The offset now stays later than any run's end, and a steady
  // clock reading plus it still fits.
  ArrivalProcess arrivals(ArrivalKind::kUniform, 1e-12, 1);
  const int64_t far = arrivals.NextOffsetNanos();
  EXPECT_GT(far, int64_t{3'000'000'000'000'000'000});
  EXPECT_EQ(arrivals.NextOffsetNanos(), far);
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  EXPECT_LE(far, std::numeric_limits<int64_t>::max() - now);
}

}  // namespace
}  // namespace encoderd::loadtest
