// The CPU kernels' own parallel regions, on the OpenMP runtime oneDNN runs
// on (kernels/cpu_context.h).
#pragma once

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

namespace encoderd::kernels {

namespace parallel_internal {
using Call = void (*)(const void* body, int64_t t, int64_t nt);
// Runs call(body, t, nt) on the team of the WithTeam this thread is running
// the work of, and returns true; false, having done nothing, where there is
// none, it has more threads than `threads`, or it is running a region
// already.
bool RunOnTeam(int threads, Call call, const void* body) noexcept;
}  // namespace parallel_internal

// Runs body(t, nt) once on each thread t of nt, nt being what the runtime
// gives for `threads` (fewer inside another parallel region). With one
// thread the caller runs it, as nt = 1, without entering an OpenMP region:
// libgomp sets a team up for one thread too (`machine_limits`'
// omp_region_us: 1.2 us on a 2-vCPU AMD EPYC), and a forward of a few rows
// has dozens of one-thread regions (docs/architecture.md, "Few rows").
// Inside WithTeam's work, on the threads WithTeam holds.
template <class Body>
void InParallel(int threads, const Body& body) {
  if (threads <= 1) {
    body(int64_t{0}, int64_t{1});
    return;
  }
  const parallel_internal::Call call = [](const void* b, int64_t t, int64_t nt) {
    (*static_cast<const Body*>(b))(t, nt);
  };
  if (parallel_internal::RunOnTeam(threads, call, &body)) return;
#pragma omp parallel num_threads(threads)
  body(int64_t{omp_get_thread_num()}, int64_t{omp_get_num_threads()});
}

// Runs work() in the caller while the other threads of one OpenMP region of
// `threads` wait, spinning, for the regions work() starts through
// InParallel, which the caller hands them through a counter: a region
// starts and ends without libgomp setting a team up and taking it down
// (2.6-3.1 us an empty region of two threads on the 2-vCPU EPYC), for a
// stretch of work of many short regions, a forward of a few rows. Anything
// else that work() runs in parallel (oneDNN) runs on one thread there, the
// caller being in an OpenMP region. With one thread, or called inside an
// OpenMP region or another WithTeam's work: work() alone. What work()
// throws is thrown here once the threads are let go.
void WithTeam(int threads, const std::function<void()>& work);

// Thread t of nt's share [begin, end) of n items: contiguous, in order,
// sizes differing by one at most.
struct Share {
  int64_t begin, end;
};
inline Share ShareOf(int64_t n, int64_t t, int64_t nt) { return {n * t / nt, n * (t + 1) / nt}; }

// n items split between `threads` threads as ShareOf splits them, for the
// threads of one region to claim: each takes its own share's items from
// the front, one at a time, in order; one whose share is done takes the
// back half of the largest share left (the larger half of an odd count)
// and goes on with it in the same way. So a thread that falls behind (a
// preempted vCPU, a core another process shares) leaves its last items to
// the others instead of holding them all at the region's end. Every item
// is claimed once, also where the runtime runs fewer threads than
// `threads`: the shares of those never started are taken. Any thread may
// call Next for its own t; a claim is one atomic operation on the share's
// cache line. Next may find nothing left while a thread that has just
// taken a back half is still putting it in its own share (two threads
// are enough: the one it was taken from runs out meanwhile): that thread
// then claims it all itself, so every item is still claimed, and the
// finding thread only stops early.
class ClaimedShares {
 public:
  ClaimedShares(int64_t n, int64_t threads);
  // Thread t's next item: true and *item; false once no share has any left.
  bool Next(int64_t t, int64_t* item);

 private:
  // [begin, end) of a share's unclaimed items, packed begin << 32 | end.
  struct alignas(64) Range {
    std::atomic<uint64_t> items{0};
  };
  std::vector<Range> ranges_;
};

}  // namespace encoderd::kernels
