#include "kernels/cpu/bf16_convert.h"

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

// The same two on AVX2: rounded bits as RoundAvx512 makes them, NaN lanes
// replaced by the quiet NaN.
__attribute__((target("avx2"))) inline __m256i RoundedBitsAvx2(__m256 v) {
  __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  bits = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7fc00000), nan);
}

__attribute__((target("avx2"))) void ConvertAvx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = _mm256_srli_epi32(RoundedBitsAvx2(_mm256_loadu_ps(src + i)), 16);
    const __m256i hi = _mm256_srli_epi32(RoundedBitsAvx2(_mm256_loadu_ps(src + i + 8)), 16);
    // packus works within 128-bit lanes: lo[0..3] hi[0..3] lo[4..7] hi[4..7].
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = ScalarToBFloat16(src[i]);
}

__attribute__((target("avx2"))) void RoundAvx2(const float* src, float* dst, int64_t n) {
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_and_si256(RoundedBitsAvx2(_mm256_loadu_ps(src + i)), mask);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(bits));
  }
  for (; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(ScalarToBFloat16(LoadFloat(src + i))) << 16;
    std::memcpy(dst + i, &bits, sizeof(bits));
  }
}

// WidenBFloat16Pairs's pairs from i on (the loops' tail), one at a time.
void WidenPairsFrom(const uint16_t* pairs, int64_t i, int64_t n, float* even, float* odd) {
  for (; i < n; ++i) {
    const uint32_t lo = static_cast<uint32_t>(pairs[2 * i]) << 16;
    std::memcpy(even + i, &lo, sizeof(lo));
    if (odd) {
      const uint32_t hi = static_cast<uint32_t>(pairs[2 * i + 1]) << 16;
      std::memcpy(odd + i, &hi, sizeof(hi));
    }
  }
}

// Each 32-bit lane holds a pair, the even value in its low half: shifted
// up, that is the even value's fp32; with the low half cleared, the odd's.
__attribute__((target("avx512f"))) void WidenPairsAvx512(const uint16_t* pairs, int64_t n,
                                                         float* even, float* odd) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i v = _mm512_loadu_si512(pairs + 2 * i);
    _mm512_storeu_si512(even + i, _mm512_slli_epi32(v, 16));
    if (odd) _mm512_storeu_si512(odd + i, _mm512_and_si512(v, high));
  }
  WidenPairsFrom(pairs, i, n, even, odd);
}

__attribute__((target("avx2"))) void WidenPairsAvx2(const uint16_t* pairs, int64_t n, float* even,
                                                    float* odd) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pairs + 2 * i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(even + i), _mm256_slli_epi32(v, 16));
    if (odd) _mm256_storeu_si256(reinterpret_cast<__m256i*>(odd + i), _mm256_and_si256(v, high));
  }
  WidenPairsFrom(pairs, i, n, even, odd);
}

}  // namespace

void WidenBFloat16Pairs(const uint16_t* pairs, int64_t n, float* even, float* odd) {
  if (GetCpuFeatures().avx512f) {
    WidenPairsAvx512(pairs, n, even, odd);
  } else if (GetCpuFeatures().avx2) {
    WidenPairsAvx2(pairs, n, even, odd);
  } else {
    WidenPairsFrom(pairs, 0, n, even, odd);
  }
}

void RoundToBFloat16(const float* src, float* dst, int64_t n) {
  if (GetCpuFeatures().avx512bw) {
    RoundAvx512(src, dst, n);
    return;
  }
  if (GetCpuFeatures().avx2) {
    RoundAvx2(src, dst, n);
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
  if (GetCpuFeatures().avx2) {
    ConvertAvx2(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = ScalarToBFloat16(src[i]);
}

void ConvertBFloat16ToFloat(const uint16_t* src, float* dst, int64_t n) {
  // A bf16 is the high half of the fp32 it stands for; the loop vectorizes.
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &bits, sizeof(bits));
  }
}

}  // namespace encoderd::kernels
