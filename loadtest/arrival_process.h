// ArrivalProcess: the intended send times of an open-loop load generator.
// Poisson arrivals (exponential inter-arrival gaps with mean 1/rate) model many
// independent clients; uniform arrivals (constant gaps) are a deterministic
// alternative. The sequence depends only on (kind, rate, seed).
#pragma once

#include <algorithm>
#include <chrono>
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

// The deadline of a call intended at `intended_ns` and sent at `sent_ns`
// (steady clock, ns) when the wall clock read `sent_at`: `timeout_ms` from
// the intended send, from which its latency is measured too. A call the
// generator sent late has that much less of its budget left, as a caller's
// would that waited; from the actual send, an OK call's latency could
// exceed its deadline by the send lag.
inline std::chrono::system_clock::time_point DeadlineFromIntended(
    int64_t intended_ns, int64_t sent_ns, int64_t timeout_ms,
    std::chrono::system_clock::time_point sent_at) {
  const auto lag = std::chrono::nanoseconds(std::max<int64_t>(0, sent_ns - intended_ns));
  return sent_at - std::chrono::duration_cast<std::chrono::system_clock::duration>(lag) +
         std::chrono::milliseconds(timeout_ms);
}

}  // namespace encoderd::loadtest
