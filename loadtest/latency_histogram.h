// LatencyHistogram: an HDR-style log-linear histogram of non-negative integer
// values (microseconds in encoderd-loadtest). Values below 2^p are counted
// exactly; above, each power-of-two range [2^k, 2^(k+1)) is split into 2^p
// equal buckets, so every recorded value lies within RelativeError() of the
// value reported for its bucket. Memory is fixed (a few tens of KiB) and
// recording is O(1). Not thread-safe: guard it, or keep one per thread and
// Merge().
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace encoderd::loadtest {

class LatencyHistogram {
 public:
  // significant_bits p in [1, 16]: relative error 2^-(p+1). Values above
  // 2^max_exponent are clamped into the highest bucket (and still counted in
  // Max()).
  explicit LatencyHistogram(int significant_bits = 7, int max_exponent = 40);

  void Record(int64_t value);
  void Merge(const LatencyHistogram& other);
  void Reset();

  int64_t Count() const { return count_; }
  int64_t Min() const { return count_ ? min_ : 0; }
  int64_t Max() const { return count_ ? max_ : 0; }
  double Mean() const { return count_ ? sum_ / static_cast<double>(count_) : 0.0; }

  // The value at quantile q in [0, 1]: the representative of the bucket that
  // holds the ceil(q * Count())-th smallest value (q = 0: the minimum), clamped
  // to [Min(), Max()]. 0 when empty.
  int64_t ValueAtQuantile(double q) const;

  // Bound on |ValueAtQuantile(q) - exact| / exact for exact > 0.
  double RelativeError() const;

 private:
  size_t BucketIndex(int64_t value) const;
  int64_t BucketMidpoint(size_t index) const;

  int bits_;
  int max_exponent_;
  int64_t sub_buckets_;  // 2^bits_
  std::vector<int64_t> counts_;
  int64_t count_ = 0;
  int64_t min_ = 0;
  int64_t max_ = 0;
  double sum_ = 0;
};

}  // namespace encoderd::loadtest
