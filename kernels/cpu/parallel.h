// The CPU kernels' own parallel regions, on the OpenMP runtime oneDNN runs
// on (kernels/cpu_context.h).
#pragma once

#include <omp.h>

#include <cstdint>

namespace encoderd::kernels {

// Runs body(t, nt) once on each thread t of nt, nt being what the runtime
// gives for `threads` (fewer inside another parallel region). With one
// thread the caller runs it, as nt = 1, without entering an OpenMP region:
// libgomp sets a team up for one thread too (`machine_limits`'
// omp_region_us: 1.2 us on a 2-vCPU AMD EPYC), and a forward of a few rows
// has dozens of one-thread regions (docs/architecture.md, "Few rows").
template <class Body>
void InParallel(int threads, const Body& body) {
  if (threads <= 1) {
    body(int64_t{0}, int64_t{1});
    return;
  }
#pragma omp parallel num_threads(threads)
  body(int64_t{omp_get_thread_num()}, int64_t{omp_get_num_threads()});
}

// Thread t of nt's share [begin, end) of n items: contiguous, in order,
// sizes differing by one at most.
struct Share {
  int64_t begin, end;
};
inline Share ShareOf(int64_t n, int64_t t, int64_t nt) { return {n * t / nt, n * (t + 1) / nt}; }

}  // namespace encoderd::kernels
