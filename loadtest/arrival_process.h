// ArrivalProcess: the intended send times of an open-loop load generator.
// Poisson arrivals (exponential inter-arrival gaps with mean 1/rate) model many
// independent clients; uniform arrivals (constant gaps) are a deterministic
// alternative. The sequence depends only on (kind, rate, seed).
#pragma once

#include <cstdint>
#include <random>

namespace encoderd::loadtest {

enum class ArrivalKind { kPoisson, kUniform };

class ArrivalProcess {
 public:
  // rate_per_s must be > 0.
  ArrivalProcess(ArrivalKind kind, double rate_per_s, uint64_t seed);

  // Seconds from the previous arrival (or from the start) to the next one.
  double NextGapSeconds();

  // Offset of the next arrival from the start, in nanoseconds; accumulates
  // gaps in double precision, so there is no drift from per-gap rounding.
  int64_t NextOffsetNanos();

  double rate_per_s() const { return rate_; }

 private:
  ArrivalKind kind_;
  double rate_;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> exponential_;
  double elapsed_s_ = 0;
};

}  // namespace encoderd::loadtest
