// Compiled with -mavx512f -mavx512bw (kernels/CMakeLists.txt) and called only
// when the CPU has both. Uses no standard-library templates, so no AVX-512
// instantiation of a shared inline function can leak into generic code.
#include "kernels/cpu/int8_avx512.h"

#include <immintrin.h>

#include "kernels/cpu/avx512_math.h"

namespace encoderd::kernels {

void RowRangeAvx512(const float* row, int64_t k, float* lo, float* hi) {
  __m512 vlo = _mm512_setzero_ps(), vhi = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 m = FirstLanes(k - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, row + i);  // masked lanes are 0: in range
    // A NaN is passed over (min/max return their second operand then), as
    // std::min(lo, x) and std::max(hi, x) do in the portable path, so both
    // paths quantize a row with a NaN the same way.
    vlo = _mm512_min_ps(v, vlo);
    vhi = _mm512_max_ps(v, vhi);
  }
  *lo = _mm512_reduce_min_ps(vlo);
  *hi = _mm512_reduce_max_ps(vhi);
}

void QuantizeRowAvx512(const float* row, int64_t k, float inv_scale, float zero, uint8_t* q) {
  const __m512 inv = _mm512_set1_ps(inv_scale), z = _mm512_set1_ps(zero);
  const __m512 top = _mm512_set1_ps(255.f), bottom = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 m = FirstLanes(k - i);
    // Rounded before the zero point is added, as the scalar path does.
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + i), inv);
    v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
    v = _mm512_min_ps(_mm512_max_ps(v, bottom), top);
    _mm512_mask_cvtusepi32_storeu_epi8(q + i, m, _mm512_cvtps_epu32(v));
  }
}

}  // namespace encoderd::kernels
