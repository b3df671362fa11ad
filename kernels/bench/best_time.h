// Timing for the kernel micro-benchmarks: the best of repeated calls.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>

namespace encoderd::kernels::bench {

// Best seconds per call of `fn` after one warm-up call (JIT, page faults),
// over calls lasting at least `budget` seconds and at least `min_reps` calls.
inline double BestSeconds(const std::function<void()>& fn, double budget, int min_reps = 3) {
  using Clock = std::chrono::steady_clock;
  fn();
  double best = 1e30, spent = 0;
  for (int reps = 0; spent < budget || reps < min_reps; ++reps) {
    const auto t0 = Clock::now();
    fn();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, dt);
    spent += dt;
  }
  return best;
}

}  // namespace encoderd::kernels::bench
