#include "kernels/cpu/parallel.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <stdexcept>
#include <thread>

namespace encoderd::kernels {
namespace {

// The threads of a WithTeam. The caller (thread 0) starts a region by
// setting call and body and bumping `epoch`, which the others spin on; each
// counts itself in `done` when its share returns, and the caller waits for
// all of them before the next region. `stop` (then an epoch bump) lets them
// go.
struct Team {
  int threads = 1;
  bool busy = false;  // a region is running (the caller's alone)
  parallel_internal::Call call = nullptr;
  const void* body = nullptr;
  std::atomic<bool> stop{false};
  // On lines of their own: the workers spin on epoch while done counts them.
  alignas(64) std::atomic<uint32_t> epoch{0};
  alignas(64) std::atomic<int> done{0};
};

// The team whose work this thread runs.
thread_local Team* current_team = nullptr;

// Spins with pause while `waiting()`, then from the 4096th round on also
// yields the CPU each round: to a thread of the team that is waiting for
// one, where the threads are more than the CPUs.
template <class Waiting>
void SpinWhile(const Waiting& waiting) {
  constexpr int kPausesBeforeYield = 1 << 12;
  for (int spins = 0; waiting();) {
    _mm_pause();
    if (spins < kPausesBeforeYield) {
      ++spins;
    } else {
      std::this_thread::yield();
    }
  }
}

void Serve(Team& team, int64_t t, int64_t nt) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t now = seen;
    SpinWhile([&] { return (now = team.epoch.load(std::memory_order_acquire)) == seen; });
    seen = now;
    if (team.stop.load(std::memory_order_relaxed)) return;
    team.call(team.body, t, nt);
    team.done.fetch_add(1, std::memory_order_release);
  }
}

}  // namespace

namespace parallel_internal {

bool RunOnTeam(int threads, Call call, const void* body) noexcept {
  Team* team = current_team;
  // A team of fewer threads than asked (what the runtime gave WithTeam)
  // takes the region as an OpenMP region of that many would.
  if (team == nullptr || team->busy || threads < team->threads) return false;
  team->busy = true;
  team->call = call;
  team->body = body;
  team->done.store(0, std::memory_order_relaxed);
  team->epoch.fetch_add(1, std::memory_order_release);
  call(body, 0, team->threads);
  SpinWhile([&] { return team->done.load(std::memory_order_acquire) < team->threads - 1; });
  team->busy = false;
  return true;
}

}  // namespace parallel_internal

namespace {

constexpr uint64_t PackRange(int64_t begin, int64_t end) {
  return static_cast<uint64_t>(begin) << 32 | static_cast<uint64_t>(end);
}
constexpr int64_t RangeBegin(uint64_t r) { return static_cast<int64_t>(r >> 32); }
constexpr int64_t RangeEnd(uint64_t r) { return static_cast<int64_t>(r & 0xffffffffu); }

}  // namespace

ClaimedShares::ClaimedShares(int64_t n, int64_t threads)
    : ranges_(static_cast<size_t>(std::max<int64_t>(threads, 1))) {
  if (n < 0 || n > int64_t{0xffffffff}) throw std::invalid_argument("ClaimedShares: item count");
  const int64_t nt = static_cast<int64_t>(ranges_.size());
  for (int64_t t = 0; t < nt; ++t) {
    const Share share = ShareOf(n, t, nt);
    ranges_[static_cast<size_t>(t)].items.store(PackRange(share.begin, share.end),
                                                std::memory_order_relaxed);
  }
}

bool ClaimedShares::Next(int64_t t, int64_t* item) {
  std::atomic<uint64_t>& mine = ranges_[static_cast<size_t>(t)].items;
  uint64_t r = mine.load(std::memory_order_relaxed);
  while (RangeBegin(r) < RangeEnd(r)) {
    if (mine.compare_exchange_weak(r, PackRange(RangeBegin(r) + 1, RangeEnd(r)),
                                   std::memory_order_relaxed)) {
      *item = RangeBegin(r);
      return true;
    }
  }
  // The others only shrink a share; only its own thread refills it (below),
  // once it is empty, with the back of another share's range less the item
  // it claims at once. So no share holds the same range twice, and a
  // compare-exchange that succeeds found the range it read.
  for (;;) {
    size_t victim = ranges_.size();
    uint64_t seen = 0;
    int64_t most = 0;
    for (size_t u = 0; u < ranges_.size(); ++u) {
      const uint64_t v = ranges_[u].items.load(std::memory_order_relaxed);
      if (RangeEnd(v) - RangeBegin(v) > most) {
        victim = u, seen = v, most = RangeEnd(v) - RangeBegin(v);
      }
    }
    if (victim == ranges_.size()) return false;
    const int64_t end = RangeEnd(seen), from = end - (most + 1) / 2;
    if (!ranges_[victim].items.compare_exchange_strong(seen, PackRange(RangeBegin(seen), from),
                                                       std::memory_order_relaxed)) {
      continue;  // its owner or another thread took some first: look again
    }
    mine.store(PackRange(from + 1, end), std::memory_order_relaxed);
    *item = from;
    return true;
  }
}

void WithTeam(int threads, const std::function<void()>& work) {
  if (threads <= 1 || current_team != nullptr || omp_in_parallel()) {
    work();
    return;
  }
  Team team;
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    if (t == 0) {
      team.threads = static_cast<int>(nt);
      current_team = nt > 1 ? &team : nullptr;
      try {
        work();
      } catch (...) {
        error = std::current_exception();
      }
      current_team = nullptr;
      team.stop.store(true, std::memory_order_relaxed);
      team.epoch.fetch_add(1, std::memory_order_release);
    } else {
      Serve(team, t, nt);
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace encoderd::kernels
