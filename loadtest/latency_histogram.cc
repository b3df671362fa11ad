#include "loadtest/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace encoderd::loadtest {

LatencyHistogram::LatencyHistogram(int significant_bits, int max_exponent)
    : bits_(std::clamp(significant_bits, 1, 16)),
      max_exponent_(std::clamp(max_exponent, bits_ + 1, 62)),
      sub_buckets_(int64_t{1} << bits_),
      // Exact buckets [0, 2^p), then 2^p buckets per exponent p..max_exponent.
      counts_(static_cast<size_t>(sub_buckets_ * (max_exponent_ - bits_ + 2)), 0) {}

size_t LatencyHistogram::BucketIndex(int64_t value) const {
  if (value < sub_buckets_) return static_cast<size_t>(value);
  const int k = 63 - __builtin_clzll(static_cast<uint64_t>(value));
  const int shift = k - bits_;
  const int64_t sub = (value >> shift) - sub_buckets_;  // in [0, 2^p)
  return static_cast<size_t>(sub_buckets_ * (shift + 1) + sub);
}

int64_t LatencyHistogram::BucketMidpoint(size_t index) const {
  const int64_t i = static_cast<int64_t>(index);
  if (i < sub_buckets_) return i;
  const int shift = static_cast<int>(i / sub_buckets_) - 1;
  const int64_t low = (sub_buckets_ + i % sub_buckets_) << shift;
  const int64_t width = int64_t{1} << shift;
  return low + (width - 1) / 2;
}

void LatencyHistogram::Record(int64_t value) {
  value = std::max<int64_t>(value, 0);
  const int64_t clamped = std::min<int64_t>(value, (int64_t{1} << (max_exponent_ + 1)) - 1);
  ++counts_[BucketIndex(clamped)];
  if (count_ == 0 || value < min_) min_ = value;
  if (count_ == 0 || value > max_) max_ = value;
  ++count_;
  sum_ += static_cast<double>(value);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  if (other.count_ == 0) return;
  if (other.bits_ == bits_ && other.max_exponent_ == max_exponent_) {
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  } else {
    for (size_t i = 0; i < other.counts_.size(); ++i) {
      if (other.counts_[i]) counts_[BucketIndex(other.BucketMidpoint(i))] += other.counts_[i];
    }
  }
  if (count_ == 0 || other.min_ < min_) min_ = other.min_;
  if (count_ == 0 || other.max_ > max_) max_ = other.max_;
  count_ += other.count_;
  sum_ += other.sum_;
}

void LatencyHistogram::Reset() {
  std::fill(counts_.begin(), counts_.end(), 0);
  count_ = min_ = max_ = 0;
  sum_ = 0;
}

int64_t LatencyHistogram::ValueAtQuantile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const int64_t rank =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(q * static_cast<double>(count_))));
  if (rank >= count_) return max_;
  int64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank) return std::clamp(BucketMidpoint(i), min_, max_);
  }
  return max_;
}

double LatencyHistogram::RelativeError() const { return std::ldexp(1.0, -(bits_ + 1)); }

}  // namespace encoderd::loadtest
