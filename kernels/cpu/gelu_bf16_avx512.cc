// Compiled with -mavx512f -mavx512bw -mavx512bf16 (kernels/CMakeLists.txt)
// and called only when the CPU has all three. Uses no standard-library
// templates, so no AVX-512 instantiation of a shared inline function can leak
// into generic code.
#include "kernels/cpu/gelu_bf16_avx512.h"

// GCC 12 reports the _mm512_undefined_* inside its own intrinsic headers as
// uninitialised (GCC bug 105593); the warning says nothing about this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/avx512_math.h"

namespace encoderd::kernels {
namespace {

// Lanes [0, n) of a 16-lane block, n <= 16.
__mmask16 Tail(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// 16 bf16 values widened to fp32 (exactly: a bf16 is the high half of an
// fp32).
__m512 Widen(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

__m256i Narrow(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }

}  // namespace

void GeluBf16Avx512(uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i* p = reinterpret_cast<__m256i*>(y + i);
    _mm256_storeu_si256(p, Narrow(GeluErf(Widen(_mm256_loadu_si256(p)))));
  }
  if (i < n) {  // the last 1-15 values through a block of 16 (no AVX512-VL here)
    alignas(32) uint16_t block[16] = {};
    for (int64_t j = i; j < n; ++j) block[j - i] = y[j];
    __m256i* p = reinterpret_cast<__m256i*>(block);
    _mm256_store_si256(p, Narrow(GeluErf(Widen(_mm256_load_si256(p)))));
    for (int64_t j = i; j < n; ++j) y[j] = block[j - i];
  }
}

void GeluOfBf16Avx512(float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, GeluErf(Widen(Narrow(_mm512_loadu_ps(y + i)))));
  }
  if (i < n) {
    const __mmask16 tail = Tail(n - i);
    _mm512_mask_storeu_ps(y + i, tail, GeluErf(Widen(Narrow(_mm512_maskz_loadu_ps(tail, y + i)))));
  }
}

}  // namespace encoderd::kernels
