// Vector math shared by the AVX2 + FMA kernels (attention_avx2.cc,
// few_rows_gemm_avx2.cc, int8_gemm_avx2.cc): a lane mask, loads and stores
// through it, and avx512_math.h's functions on 8-lane registers.
// Include only from files compiled with -mavx2 -mfma; the functions have
// internal linkage, so no AVX2 copy can be chosen for generic code.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace encoderd::kernels {
namespace {

// Lanes [0, n) set (none for n <= 0, all of them from 8 on).
inline __m256i FirstLanes(int64_t n) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n < 8 ? static_cast<int>(n) : 8), index);
}

// The first `left` floats from p (1 to 8; the other lanes 0), and the first
// `left` lanes of v to p. They mask only where fewer than 8 floats exist:
// AMD's Zen cores run VMASKMOVPS as microcode (a masked store takes tens of
// cycles), and masking every vector made the epilogue a tenth of a few-row
// GEMM's time on a Zen 1 EPYC.
inline __m256 LoadFirst(const float* p, int64_t left) {
  return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, FirstLanes(left));
}
inline void StoreFirst(float* p, int64_t left, __m256 v) {
  if (left >= 8) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, FirstLanes(left), v);
  }
}

// exp(x) for x <= 0 as avx512_math.h's ExpNonPositive computes it (range
// reduction, degree-6 Taylor polynomial), with 2^n built in the exponent
// bits: x is clamped at -87.3, so n >= -126 and 2^n is a normal float.
inline __m256 ExpNonPositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723e-6f), r);
  __m256 p = _mm256_set1_ps(1.f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  const __m256i two_n =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

// 0.5 x (1 + erf(x / sqrt 2)), erf by Abramowitz & Stegun 7.1.26 (absolute
// error < 1.5e-7). avx512_math.h's GeluErf evaluates piecewise polynomials
// instead (AVX2 has no 16-entry permute), so the two differ in the last
// bits.
inline __m256 GeluErf(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678f));
  const __m256 az = _mm256_andnot_ps(sign, z);
  const __m256 t = _mm256_div_ps(
      _mm256_set1_ps(1.f), _mm256_fmadd_ps(az, _mm256_set1_ps(0.3275911f), _mm256_set1_ps(1.f)));
  __m256 poly = _mm256_set1_ps(1.061405429f);
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(-1.453152027f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(1.421413741f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(-0.284496736f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(0.254829592f));
  poly = _mm256_mul_ps(poly, t);
  const __m256 e = ExpNonPositive(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(az, az)));
  const __m256 erf_abs = _mm256_fnmadd_ps(poly, e, _mm256_set1_ps(1.f));
  // erf is odd: negated where z < 0.
  const __m256 negative = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 erf = _mm256_xor_ps(erf_abs, _mm256_and_ps(negative, sign));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x),
                       _mm256_add_ps(_mm256_set1_ps(1.f), erf));
}

}  // namespace
}  // namespace encoderd::kernels
