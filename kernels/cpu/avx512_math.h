// Vector math shared by the AVX-512 kernels (attention_avx512.cc,
// attention_avx512_bf16.cc, int8_gemm_avx512.cc, few_rows_gemm_*_avx512.cc).
// Include only from files compiled with -mavx512f; the functions have
// internal linkage, so no AVX-512 copy can be chosen for generic code.
#pragma once

#include <immintrin.h>

namespace encoderd::kernels {
namespace {

// exp(x) for x <= 0: range reduction to r in [-ln2/2, ln2/2], degree-6
// Taylor polynomial (relative error < 2e-7), 2^n by scalef.
inline __m512 ExpNonPositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
  __m512 p = _mm512_set1_ps(1.f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

// 0.5 x (1 + erf(x / sqrt 2)), erf by Abramowitz & Stegun 7.1.26 (absolute
// error < 1.5e-7).
inline __m512 GeluErf(__m512 x) {
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
}  // namespace encoderd::kernels
