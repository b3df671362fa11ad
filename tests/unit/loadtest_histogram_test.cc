// LatencyHistogram: quantiles within the stated relative error of the exact
// order statistics on known distributions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "loadtest/latency_histogram.h"

namespace encoderd::loadtest {
namespace {

// Exact value of quantile q under the histogram's definition: the
// ceil(q * n)-th smallest sample.
int64_t ExactQuantile(std::vector<int64_t> sorted, double q) {
  const size_t rank = std::max<size_t>(1, static_cast<size_t>(std::ceil(q * sorted.size())));
  return sorted[std::min(rank, sorted.size()) - 1];
}

void ExpectQuantilesWithinError(const std::vector<int64_t>& samples, int bits) {
  LatencyHistogram h(bits);
  for (int64_t v : samples) h.Record(v);
  std::vector<int64_t> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_EQ(h.Count(), static_cast<int64_t>(samples.size()));
  EXPECT_EQ(h.Min(), sorted.front());
  EXPECT_EQ(h.Max(), sorted.back());
  for (double q : {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1.0}) {
    const int64_t exact = ExactQuantile(sorted, q);
    const int64_t got = h.ValueAtQuantile(q);
    EXPECT_LE(std::abs(static_cast<double>(got - exact)),
              h.RelativeError() * static_cast<double>(exact))
        << "q=" << q << " exact=" << exact << " got=" << got << " bits=" << bits;
  }
}

TEST(LoadtestHistogramTest, RelativeErrorFollowsSignificantBits) {
  EXPECT_DOUBLE_EQ(LatencyHistogram(7).RelativeError(), 1.0 / 256);
  EXPECT_DOUBLE_EQ(LatencyHistogram(3).RelativeError(), 1.0 / 16);
}

TEST(LoadtestHistogramTest, SmallValuesAreExact) {
  LatencyHistogram h(7);
  for (int64_t v = 0; v < 128; ++v) h.Record(v);
  for (int64_t v = 1; v <= 128; ++v) EXPECT_EQ(h.ValueAtQuantile(v / 128.0), v - 1);
}

TEST(LoadtestHistogramTest, UniformLatencies) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> dist(1, 2'000'000);
  std::vector<int64_t> samples(200'000);
  for (auto& v : samples) v = dist(rng);
  for (int bits : {3, 7, 10}) ExpectQuantilesWithinError(samples, bits);
}

TEST(LoadtestHistogramTest, HeavyTailedLatencies) {
  // Log-normal around 5 ms with a long tail up to minutes.
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> dist(std::log(5000.0), 1.5);
  std::vector<int64_t> samples(200'000);
  for (auto& v : samples) v = static_cast<int64_t>(dist(rng)) + 1;
  for (int bits : {3, 7}) ExpectQuantilesWithinError(samples, bits);
}

TEST(LoadtestHistogramTest, ExponentialLatencies) {
  std::mt19937_64 rng(3);
  std::exponential_distribution<double> dist(1.0 / 20000.0);
  std::vector<int64_t> samples(100'000);
  for (auto& v : samples) v = static_cast<int64_t>(dist(rng));
  ExpectQuantilesWithinError(samples, 7);
}

TEST(LoadtestHistogramTest, MeanIsExactAndMergeMatchesSingleHistogram) {
  LatencyHistogram a, b, all;
  for (int64_t v = 1; v <= 10'000; ++v) {
    (v % 3 ? a : b).Record(v * 37);
    all.Record(v * 37);
  }
  EXPECT_DOUBLE_EQ(all.Mean(), 37.0 * 10'001 / 2);
  a.Merge(b);
  EXPECT_EQ(a.Count(), all.Count());
  EXPECT_EQ(a.Min(), all.Min());
  EXPECT_EQ(a.Max(), all.Max());
  EXPECT_DOUBLE_EQ(a.Mean(), all.Mean());
  for (double q : {0.1, 0.5, 0.99, 0.999}) EXPECT_EQ(a.ValueAtQuantile(q), all.ValueAtQuantile(q));
}

TEST(LoadtestHistogramTest, EmptyNegativeAndHugeValues) {
  LatencyHistogram h(7, 20);
  EXPECT_EQ(h.ValueAtQuantile(0.5), 0);
  EXPECT_EQ(h.Count(), 0);
  h.Record(-5);                // clock skew: counted as 0
  h.Record(int64_t{1} << 40);  // beyond the tracked range: clamped bucket, exact max
  EXPECT_EQ(h.Count(), 2);
  EXPECT_EQ(h.Min(), 0);
  EXPECT_EQ(h.Max(), int64_t{1} << 40);
  EXPECT_EQ(h.ValueAtQuantile(1.0), int64_t{1} << 40);
  h.Reset();
  EXPECT_EQ(h.Count(), 0);
}

}  // namespace
}  // namespace encoderd::loadtest
