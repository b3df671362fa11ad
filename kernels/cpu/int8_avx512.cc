// Compiled with -mavx512f -mavx512bw (kernels/CMakeLists.txt) and called only
// when the CPU has both. Uses no standard-library templates, so no AVX-512
// instantiation of a shared inline function can leak into generic code.
#include "kernels/cpu/int8_avx512.h"

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

// 0.5 x (1 + erf(x / sqrt 2)), erf by Abramowitz & Stegun 7.1.26 (absolute
// error < 1.5e-7).
__m512 Gelu(__m512 x) {
  const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678f));
  const __m512 az = _mm512_abs_ps(z);
  const __m512 t = _mm512_div_ps(
      _mm512_set1_ps(1.f), _mm512_fmadd_ps(az, _mm512_set1_ps(0.3275911f), _mm512_set1_ps(1.f)));
  __m512 poly = _mm512_set1_ps(1.061405429f);
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(-1.453152027f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(1.421413741f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(-0.284496736f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(0.254829592f));
  poly = _mm512_mul_ps(poly, t);
  const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(az, az)));
  __m512 erf_abs = _mm512_fnmadd_ps(poly, e, _mm512_set1_ps(1.f));
  // erf is odd: the sign of z.
  const __mmask16 negative = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 erf = _mm512_mask_sub_ps(erf_abs, negative, _mm512_setzero_ps(), erf_abs);
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x),
                       _mm512_add_ps(_mm512_set1_ps(1.f), erf));
}

}  // namespace

void RowRangeAvx512(const float* row, int64_t k, float* lo, float* hi) {
  __m512 vlo = _mm512_setzero_ps(), vhi = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 m = k - i >= 16 ? static_cast<__mmask16>(0xffff) : Tail(k - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, row + i);  // masked lanes are 0: in range
    vlo = _mm512_min_ps(vlo, v);
    vhi = _mm512_max_ps(vhi, v);
  }
  *lo = _mm512_reduce_min_ps(vlo);
  *hi = _mm512_reduce_max_ps(vhi);
}

void QuantizeRowAvx512(const float* row, int64_t k, float inv_scale, float zero, uint8_t* q) {
  const __m512 inv = _mm512_set1_ps(inv_scale), z = _mm512_set1_ps(zero);
  const __m512 top = _mm512_set1_ps(255.f), bottom = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __mmask16 m = k - i >= 16 ? static_cast<__mmask16>(0xffff) : Tail(k - i);
    // Rounded before the zero point is added, as the scalar path does.
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + i), inv);
    v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
    v = _mm512_min_ps(_mm512_max_ps(v, bottom), top);
    _mm512_mask_cvtusepi32_storeu_epi8(q + i, m, _mm512_cvtps_epu32(v));
  }
}

void Int8EpilogueRowAvx512(const float* acc, int64_t n, float scale, float scale_zero,
                           const float* comp, const float* bias, const float* residual, bool gelu,
                           bool relu, float* out) {
  const __m512 s = _mm512_set1_ps(scale), sz = _mm512_set1_ps(scale_zero);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? static_cast<__mmask16>(0xffff) : Tail(n - j);
    __m512 v = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, acc + j));
    v = _mm512_fnmadd_ps(sz, _mm512_maskz_loadu_ps(m, comp + j), v);
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
    if (residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, residual + j));
    if (gelu) v = Gelu(v);
    if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
    _mm512_mask_storeu_ps(out + j, m, v);
  }
}

}  // namespace encoderd::kernels
