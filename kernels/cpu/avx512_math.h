// Vector math shared by the AVX-512 kernels (attention_avx512.cc,
// attention_avx512_bf16.cc, int8_gemm_avx512.cc, few_rows_gemm_*_avx512.cc).
// Include only from files compiled with -mavx512f; the functions have
// internal linkage, so no AVX-512 copy can be chosen for generic code.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace encoderd::kernels {
namespace {

// Lanes [0, n) of a 16-lane block, 0 <= n <= 16.
inline __mmask16 FirstLanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// 16 bf16 values widened to fp32 (exactly: a bf16 is the high half of an
// fp32).
inline __m512 WidenBf16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

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

// x rounded to bf16 (to nearest, ties to even) and widened back to fp32;
// NaN stays NaN. Integer arithmetic: AVX-512 F alone.
inline __m512 RoundedToBf16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i up = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __m512 rounded =
      _mm512_castsi512_ps(_mm512_and_si512(up, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  return _mm512_mask_mov_ps(rounded, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// GeluErf's 0.5 erf(a / sqrt 2) for a = |x| in [0, 5.5): 16 intervals of
// 5.5 / 16, on each a degree-5 polynomial in u = a / (5.5 / 16) - i - 0.5,
// u in [-0.5, 0.5]; coefficient d of interval i is
// kGeluErfCoefficients[d][i], as kernels/cpu/fit_gelu_erf.py prints them
// (near-minimax fits in double, rounded to float).
alignas(64) constexpr float kGeluErfCoefficients[6][16] = {
    {0.0682320967f, 0.196941823f, 0.304933161f, 0.385536015f, 0.439053297f, 0.470662802f,
     0.487270802f, 0.495033085f, 0.498260349f, 0.499453872f, 0.499846518f, 0.499961436f,
     0.499991328f, 0.499998271f, 0.499999702f, 0.49999994f},
    {0.135125712f, 0.120065995f, 0.0947946906f, 0.0665012822f, 0.0414531976f, 0.0229597948f,
     0.0112995198f, 0.0049412176f, 0.00191995024f, 0.000662869425f, 0.000203351839f,
     5.54306971e-05f, 1.34256352e-05f, 2.88936008e-06f, 5.52523829e-07f, 9.38821572e-08f},
    {-0.00399167184f, -0.0106404349f, -0.0140015027f, -0.013751559f, -0.0110211736f,
     -0.00746089313f, -0.00433945004f, -0.00218955078f, -0.000964190695f, -0.000372043782f,
     -0.000126142244f, -3.76566968e-05f, -9.91282741e-06f, -2.30373234e-06f, -4.73087795e-07f,
     -8.59098037e-08f},
    {-0.00258250907f, -0.00173589995f, -0.0004881676f, 0.000586058362f, 0.00113705127f,
     0.00116409606f, 0.000888458104f, 0.000549506862f, 0.000285003509f, 0.000126163723f,
     4.81670759e-05f, 1.59666779e-05f, 4.61667241e-06f, 1.16824219e-06f, 2.59357392e-07f,
     5.06114475e-08f},
    {0.000115909817f, 0.000284564099f, 0.000310142728f, 0.00020970183f, 6.64031249e-05f,
     -4.13425405e-05f, -8.45063405e-05f, -7.83917567e-05f, -5.26080039e-05f, -2.81981083e-05f,
     -1.25562046e-05f, -4.73935279e-06f, -1.53451788e-06f, -4.29503785e-07f, -1.04476698e-07f,
     -2.21721255e-08f},
    {4.40939257e-05f, 2.05329598e-05f, -9.60834677e-06f, -2.75415805e-05f, -2.70231067e-05f,
     -1.51475906e-05f, -2.74239369e-06f, 4.12777081e-06f, 5.47762556e-06f, 4.06475374e-06f,
     2.2450447e-06f, 9.97300617e-07f, 3.68542203e-07f, 1.15376778e-07f, 3.09433297e-08f,
     7.16245774e-09f},
};

// 0.5 x (1 + erf(x / sqrt 2)): 0.5 erf(|x| / sqrt 2) from
// kGeluErfCoefficients, exactly 0.5 from |x| > 5.499 on (erf is 1 to fp32
// there), its sign that of x. Within 1.5e-7 x max(1, |GELU(x)|) of the
// exact GELU (LinearTest.GeluErfOnAvx512IsWithinItsBound checks floats
// across [-12, 12] against double erf). No division and no exp, which the
// Abramowitz & Stegun 7.1.26 form it replaced needed.
inline __m512 GeluErf(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 a = _mm512_min_ps(ax, _mm512_set1_ps(5.499f));
  const __m512 s = _mm512_fmadd_ps(a, _mm512_set1_ps(16.f / 5.5f), _mm512_set1_ps(-0.5f));
  const __m512 r = _mm512_roundscale_ps(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 u = _mm512_sub_ps(s, r);
  const __m512i i = _mm512_cvttps_epi32(r);  // 0 to 15
  __m512 p = _mm512_permutexvar_ps(i, _mm512_load_ps(kGeluErfCoefficients[5]));
  for (int d = 4; d >= 0; --d) {
    p = _mm512_fmadd_ps(p, u, _mm512_permutexvar_ps(i, _mm512_load_ps(kGeluErfCoefficients[d])));
  }
  p = _mm512_mask_mov_ps(p, _mm512_cmp_ps_mask(ax, _mm512_set1_ps(5.499f), _CMP_GT_OQ),
                         _mm512_set1_ps(0.5f));
  const __m512i sign =
      _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512 h = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(p), sign));
  return _mm512_fmadd_ps(x, h, _mm512_mul_ps(_mm512_set1_ps(0.5f), x));
}

}  // namespace
}  // namespace encoderd::kernels
