// Compiled with -mavx512f -mavx512bw -mavx512bf16 (kernels/CMakeLists.txt)
// and called only when the CPU has all three.
#include "kernels/cpu/bf16_probe_avx512.h"

// GCC 12 reports the _mm512_undefined_* inside its own intrinsic headers as
// uninitialised (GCC bug 105593); the warning says nothing about this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace encoderd::kernels {
namespace {

// 16 independent accumulators, more than either instruction's latency
// times its throughput on the CPUs measured, so the loop runs at the
// instruction's throughput.
#define ENCODERD_PROBE_16(M) \
  M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)
#define ENCODERD_PROBE_DECLARE(i) __m512 a##i = _mm512_set1_ps(static_cast<float>(i));
#define ENCODERD_PROBE_SUM(i) +_mm512_reduce_add_ps(a##i)

// Each loop stores its sums here: a side effect, so that the compiler can
// neither merge the passes of one loop (same arguments, same result) nor
// move one across the clock's reads.
volatile float probe_sink = 0.f;

__attribute__((noinline)) void NativeLoop(int64_t iterations, __m512 x, __m512 y) {
  ENCODERD_PROBE_16(ENCODERD_PROBE_DECLARE)
  for (int64_t i = 0; i < iterations; ++i) {
#define ENCODERD_PROBE_DOT(i) a##i = _mm512_dpbf16_ps(a##i, (__m512bh)x, (__m512bh)y);
    ENCODERD_PROBE_16(ENCODERD_PROBE_DOT)
#undef ENCODERD_PROBE_DOT
  }
  probe_sink = 0.f ENCODERD_PROBE_16(ENCODERD_PROBE_SUM);
}

__attribute__((noinline)) void FmaLoop(int64_t iterations, __m512 x, __m512 y) {
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

template <typename Loop>
double Seconds(Loop loop, int64_t iterations, __m512 x, __m512 y) {
  const auto t0 = std::chrono::steady_clock::now();
  loop(iterations, x, y);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Bf16DotRates MeasureBf16DotRatesAvx512() {
  // 16 x 8192 instructions: 0.03-0.1 ms a loop on the CPUs measured. The two
  // loops take turns, so that a pause of the host hits one pass, not one
  // instruction; each keeps its fastest pass.
  constexpr int64_t kIterations = 8192;
  constexpr int kPasses = 7;
  // Small values: the sums stay normal numbers (denormals could slow either).
  const __m512 x = _mm512_set1_ps(1.f / 1024), y = _mm512_set1_ps(1.f / 1024);
  double native = 1e30, fma = 1e30;
  Seconds(NativeLoop, kIterations, x, y);  // warm-up: the core's wide units wake
  Seconds(FmaLoop, kIterations, x, y);
  for (int pass = 0; pass < kPasses; ++pass) {
    native = std::min(native, Seconds(NativeLoop, kIterations, x, y));
    fma = std::min(fma, Seconds(FmaLoop, kIterations, x, y));
  }
  const double instructions = 16.0 * kIterations;
  Bf16DotRates rates;
  rates.native_gmacs = native > 0 ? instructions * 32 / native / 1e9 : 0;
  rates.fma_gmacs = fma > 0 ? instructions * 16 / fma / 1e9 : 0;
  return rates;
}

}  // namespace encoderd::kernels
