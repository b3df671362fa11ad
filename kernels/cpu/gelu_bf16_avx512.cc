// Compiled with -mavx512f -mavx512bw -mavx512bf16 (kernels/CMakeLists.txt)
// and called only when the CPU has all three. Uses no standard-library
// templates, so no AVX-512 instantiation of a shared inline function can leak
// into generic code.
#include "kernels/cpu/gelu_bf16_avx512.h"

#include <immintrin.h>

#include "kernels/cpu/avx512_math.h"

namespace encoderd::kernels {
namespace {

// 16 fp32 values rounded to bf16 (nearest even), as oneDNN's bf16 GEMMs
// round their output.
__m256i NarrowBf16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }

}  // namespace

void GeluBf16Avx512(uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i* p = reinterpret_cast<__m256i*>(y + i);
    _mm256_storeu_si256(p, NarrowBf16(GeluErf(WidenBf16(_mm256_loadu_si256(p)))));
  }
  if (i < n) {  // the last 1-15 values through a block of 16 (no AVX512-VL here)
    alignas(32) uint16_t block[16] = {};
    for (int64_t j = i; j < n; ++j) block[j - i] = y[j];
    __m256i* p = reinterpret_cast<__m256i*>(block);
    _mm256_store_si256(p, NarrowBf16(GeluErf(WidenBf16(_mm256_load_si256(p)))));
    for (int64_t j = i; j < n; ++j) y[j] = block[j - i];
  }
}

void GeluF32Avx512(float* y, int64_t n, bool round_to_bf16) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = FirstLanes(n - i);
    __m512 v = _mm512_maskz_loadu_ps(lanes, y + i);
    if (round_to_bf16) v = WidenBf16(NarrowBf16(v));
    _mm512_mask_storeu_ps(y + i, lanes, GeluErf(v));
  }
}

}  // namespace encoderd::kernels
