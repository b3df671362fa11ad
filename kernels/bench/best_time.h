// Timing for the kernel micro-benchmarks: the best (and the median) of
// repeated calls.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace encoderd::kernels::bench {

// Seconds per call of `fn`: the best and the median call.
struct CallSeconds {
  double best, median;
};

// Times calls of `fn` after one warm-up call (JIT, page faults), lasting at
// least `budget` seconds and at least `min_reps` calls.
inline CallSeconds TimeCalls(const std::function<void()>& fn, double budget, int min_reps = 3) {
  using Clock = std::chrono::steady_clock;
  fn();
  std::vector<double> times;
  double spent = 0;
  for (int reps = 0; spent < budget || reps < min_reps; ++reps) {
    const auto t0 = Clock::now();
    fn();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    times.push_back(dt);
    spent += dt;
  }
  std::sort(times.begin(), times.end());
  return {times.front(), times[times.size() / 2]};
}

// Best seconds per call of `fn` (TimeCalls).
inline double BestSeconds(const std::function<void()>& fn, double budget, int min_reps = 3) {
  return TimeCalls(fn, budget, min_reps).best;
}

}  // namespace encoderd::kernels::bench
