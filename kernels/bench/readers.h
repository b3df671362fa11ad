// The read-bandwidth readers of the benchmarks (machine_limits.cc reads a
// large buffer with each, gemm_bench.cc the packed weights its streamed
// passes read). Each reads one thread's share: the sum of its words, read
// each once, in order. The GCC 12 _mm512_undefined_* warning (bug 105593)
// is silenced by the including file.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace encoderd::kernels::bench {

// Readers of one thread's share of the buffer: the sum of its words, read
// each once, in order. The plain loop read 13-21% less than the best of the
// others on the 2-vCPU AMD EPYC of the README (2026-11-30: 64.0 against
// 77.2 GB/s, 65.7 against 78.5, 42.4 against 48.9), and less than the
// few-row kernels stream weights at one row (kernels/bench/gemm_bench
// --stream-rows 1): so the bandwidth is the best of the readers below that
// the CPU has. `words` is a multiple of 32.
inline uint64_t ReadScalar(const uint64_t* p, size_t words) {
  uint64_t total = 0;
  for (size_t i = 0; i < words; i += 8) {
    total +=
        (p[i] + p[i + 1]) + (p[i + 2] + p[i + 3]) + (p[i + 4] + p[i + 5]) + (p[i + 6] + p[i + 7]);
  }
  return total;
}

// 256 bytes an iteration in four 64-byte loads; with kPrefetch, each line
// also prefetched into L2 16 KiB ahead, as the few-row kernels do.
template <bool kPrefetch>
__attribute__((target("avx512f"))) inline uint64_t ReadAvx512(const uint64_t* p, size_t words) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < words; i += 32) {
    const char* line = reinterpret_cast<const char*>(p + i);
    if constexpr (kPrefetch) {
      for (int l = 0; l < 4; ++l) _mm_prefetch(line + 16384 + 64 * l, _MM_HINT_T1);
    }
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(line));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(line + 64));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(line + 128));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(line + 192));
  }
  return _mm512_reduce_add_epi64(
      _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}

// The same in 32-byte loads.
template <bool kPrefetch>
__attribute__((target("avx2"))) inline uint64_t ReadAvx2(const uint64_t* p, size_t words) {
  __m256i a[8];
  for (__m256i& v : a) v = _mm256_setzero_si256();
  for (size_t i = 0; i < words; i += 32) {
    const char* line = reinterpret_cast<const char*>(p + i);
    if constexpr (kPrefetch) {
      for (int l = 0; l < 4; ++l) _mm_prefetch(line + 16384 + 64 * l, _MM_HINT_T1);
    }
    for (int j = 0; j < 8; ++j) {
      a[j] = _mm256_add_epi64(a[j],
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line + 32 * j)));
    }
  }
  for (int j = 1; j < 8; ++j) a[0] = _mm256_add_epi64(a[0], a[j]);
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a[0]);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

}  // namespace encoderd::kernels::bench
