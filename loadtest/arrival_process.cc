#include "loadtest/arrival_process.h"

#include <cmath>

namespace encoderd::loadtest {

ArrivalProcess::ArrivalProcess(ArrivalKind kind, double rate_per_s, uint64_t seed)
    : kind_(kind), rate_(rate_per_s), rng_(seed), exponential_(rate_per_s) {}

double ArrivalProcess::NextGapSeconds() {
  if (kind_ == ArrivalKind::kUniform) return 1.0 / rate_;
  return exponential_(rng_);
}

int64_t ArrivalProcess::NextOffsetNanos() {
  elapsed_s_ += NextGapSeconds();
  // Past a century the offset saturates: still later than any run's end,
  // and added to a clock reading it does not overflow.
  constexpr double kFarNanos = 3.2e18;
  const double ns = elapsed_s_ * 1e9;
  return ns < kFarNanos ? static_cast<int64_t>(std::llround(ns)) : static_cast<int64_t>(kFarNanos);
}

}  // namespace encoderd::loadtest
