// Compiled with -mavx512f -mavx512bw -mavx512bf16 (kernels/CMakeLists.txt)
// and called only when the CPU has all three. Uses no standard-library
// templates, so no AVX-512 instantiation of a shared inline function can leak
// into generic code.
#include "kernels/cpu/bf16_probe_avx512.h"

#include <immintrin.h>

namespace encoderd::kernels {
namespace {

// Each loop stores its sums here: a side effect, so that the compiler can
// neither merge the passes of one loop (same arguments, same result) nor
// move one across the caller's clock reads.
volatile float probe_sink = 0.f;

// Small inputs, read as bf16 pairs (0, 2^-10): the sums stay normal numbers
// (denormals could slow either instruction).
__m512 ProbeInput() { return _mm512_set1_ps(1.f / 1024); }

}  // namespace

// 16 independent accumulators, more than either instruction's latency
// times its throughput on the CPUs measured, so the loop runs at the
// instruction's throughput.
#define ENCODERD_PROBE_16(M) \
  M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)
#define ENCODERD_PROBE_DECLARE(i) __m512 a##i = _mm512_set1_ps(static_cast<float>(i));
#define ENCODERD_PROBE_SUM(i) +_mm512_reduce_add_ps(a##i)

void Bf16DotLoopAvx512(int64_t iterations) {
  const __m512 x = ProbeInput(), y = ProbeInput();
  ENCODERD_PROBE_16(ENCODERD_PROBE_DECLARE)
  for (int64_t i = 0; i < iterations; ++i) {
#define ENCODERD_PROBE_DOT(i) a##i = _mm512_dpbf16_ps(a##i, (__m512bh)x, (__m512bh)y);
    ENCODERD_PROBE_16(ENCODERD_PROBE_DOT)
#undef ENCODERD_PROBE_DOT
  }
  probe_sink = 0.f ENCODERD_PROBE_16(ENCODERD_PROBE_SUM);
}

void FmaLoopAvx512(int64_t iterations) {
  const __m512 x = ProbeInput(), y = ProbeInput();
  ENCODERD_PROBE_16(ENCODERD_PROBE_DECLARE)
  for (int64_t i = 0; i < iterations; ++i) {
#define ENCODERD_PROBE_FMA(i) a##i = _mm512_fmadd_ps(x, y, a##i);
    ENCODERD_PROBE_16(ENCODERD_PROBE_FMA)
#undef ENCODERD_PROBE_FMA
  }
  probe_sink = 0.f ENCODERD_PROBE_16(ENCODERD_PROBE_SUM);
}

#undef ENCODERD_PROBE_16
#undef ENCODERD_PROBE_DECLARE
#undef ENCODERD_PROBE_SUM

}  // namespace encoderd::kernels
