#include "kernels/cpu/bf16_convert.h"

// GCC 12 reports the _mm512_undefined_* inside its own intrinsic headers as
// uninitialised (GCC bug 105593); the warning says nothing about this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu_features.h"

namespace encoderd::kernels {
namespace {

inline uint16_t ScalarToBFloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return 0x7fc0;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

__attribute__((target("avx512f,avx512bw"))) void ConvertAvx512(const float* src, uint16_t* dst,
                                                               int64_t n) {
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i qnan = _mm512_set1_epi32(0x7fc00000);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(src + i);
    __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
    bits = _mm512_add_epi32(bits, _mm512_add_epi32(bias, lsb));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    bits = _mm512_mask_mov_epi32(bits, nan, qnan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16)));
  }
  for (; i < n; ++i) dst[i] = ScalarToBFloat16(src[i]);
}

// `src` may be unaligned (a legacy checkpoint's storage as mapped).
float LoadFloat(const float* p) {
  float v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

__attribute__((target("avx512f,avx512bw"))) void RoundAvx512(const float* src, float* dst,
                                                             int64_t n) {
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512i qnan = _mm512_set1_epi32(0x7fc00000);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(src + i);
    __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
    bits = _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(bias, lsb)), mask);
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), qnan);
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(bits));
  }
  for (; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(ScalarToBFloat16(LoadFloat(src + i))) << 16;
    std::memcpy(dst + i, &bits, sizeof(bits));
  }
}

}  // namespace

void RoundToBFloat16(const float* src, float* dst, int64_t n) {
  if (GetCpuFeatures().avx512bw) {
    RoundAvx512(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(ScalarToBFloat16(LoadFloat(src + i))) << 16;
    std::memcpy(dst + i, &bits, sizeof(bits));
  }
}

void ConvertFloatToBFloat16(const float* src, uint16_t* dst, int64_t n) {
  if (GetCpuFeatures().avx512bw) {
    ConvertAvx512(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = ScalarToBFloat16(src[i]);
}

}  // namespace encoderd::kernels
