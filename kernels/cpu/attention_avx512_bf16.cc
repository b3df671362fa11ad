// Compiled with -mavx512f -mavx512bw -mavx512bf16 (kernels/CMakeLists.txt)
// and called only when the CPU has all three. Uses no standard-library
// templates, so no AVX-512 instantiation of a shared inline function can leak
// into generic code.
//
// The bf16 form of attention_avx512.cc: the same blocked rows
// (attention_avx512_blocks.h), with q, k, v and the probabilities rounded to
// bf16 and both matmuls on VDPBF16PS, which multiplies pairs of bf16 and adds
// both products to one fp32 lane. The operands are therefore laid out in
// pairs along the summed index: q and k by pairs of head-dim columns, p and v
// by pairs of key rows. Scores, softmax and the sums stay fp32.
#include <immintrin.h>

#include "kernels/cpu/attention_avx512.h"
#include "kernels/cpu/attention_avx512_blocks.h"

namespace encoderd::kernels {
namespace {

// Rounds x[0 .. 32) to 32 bf16, in order: word i = (x[2i], x[2i + 1]), the
// first in the low half.
__m512 PackPairs(__m512 lo16, __m512 hi16) { return (__m512)_mm512_cvtne2ps_pbh(hi16, lo16); }

// Word i = (a[i], b[i]) of two rows of 16 bf16, a's in lanes 0-15 of
// `both`, b's in 16-31: one permutation of 16-bit lanes.
__m512 InterleaveHalves(__m512i both) {
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_castsi512_ps(_mm512_permutexvar_epi16(order, both));
}

// Word i = (a[i], b[i]): two fp32 rows of 16 rounded together.
__m512 InterleaveRows(__m512 a, __m512 b) {
  return InterleaveHalves((__m512i)_mm512_cvtne2ps_pbh(b, a));
}

// 16 bf16 values from x.
__m256i Load16(const uint16_t* x) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
}

// Operands as bf16 pairs in 32-bit words (stored and loaded as floats: bit
// patterns only, so scalar reads stay float reads), multiplied with
// VDPBF16PS (see attention_avx512_blocks.h).
struct Bf16Format {
  using Value = float;
  static constexpr int64_t kPack = 2;

  static __m512 Madd(__m512 acc, __m512 a, __m512 b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
  }

  // kt[w][j] = (k[j][2w], k[j][2w + 1]) for j < len, 0 for len <= j < lp; k
  // rows at stride ld, kt's at stride ldk; w < d / 2.
  static void PackKeys(const float* k, int64_t ld, int64_t len, int64_t lp, int64_t ldk, int64_t d,
                       float* kt) {
    PackKeyWords<kPack>(len, lp, ldk, d, kt, [&](int64_t j, int64_t c) {
      const float* row = k + j * ld + c;
      return PackPairs(_mm512_loadu_ps(row), _mm512_loadu_ps(row + 16));
    });
  }

  // vp[w][c] = (v[2w][c], v[2w + 1][c]) for 2w < len, a missing odd row 0;
  // v rows at stride ld.
  static void PackValues(const float* v, int64_t ld, int64_t len, int64_t d, float* vp) {
    for (int64_t w = 0; 2 * w < len; ++w) {
      const float* a = v + 2 * w * ld;
      const bool has_b = 2 * w + 1 < len;
      for (int64_t c = 0; c < d; c += 16) {
        const __m512 b = has_b ? _mm512_loadu_ps(a + ld + c) : _mm512_setzero_ps();
        _mm512_storeu_ps(vp + w * d + c, InterleaveRows(_mm512_loadu_ps(a + c), b));
      }
    }
  }

  static void PackQuery(const float* q, int64_t d, float scale, float* qs) {
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int64_t c = 0; c < d; c += 32) {
      _mm512_storeu_ps(qs + c / 2, PackPairs(_mm512_mul_ps(_mm512_loadu_ps(q + c), vscale),
                                             _mm512_mul_ps(_mm512_loadu_ps(q + c + 16), vscale)));
    }
  }

  // The 32 values of lo then hi rounded to bf16, as pairs of consecutive
  // values (the probabilities, SoftmaxRowPacked).
  static __m512 Words(__m512 lo, __m512 hi) { return PackPairs(lo, hi); }

  static void StoreRow(const float* os, float inv, int64_t d, float* o) {
    StoreRowF32(os, inv, d, o);
  }
};

// Bf16Format over bf16 q, k, v and output (kernels/attention.h's bfloat16
// activations): k's rows already hold their head-dim pairs, v's rows are
// interleaved without rounding, and nothing is converted but the output. The
// same bits as Bf16Format on the fp32 values these bf16 ones round, where
// q * scale rounds the same from either (a power-of-two scale).
struct Bf16ValuesFormat : Bf16Format {
  using Value = uint16_t;

  static void PackKeys(const uint16_t* k, int64_t ld, int64_t len, int64_t lp, int64_t ldk,
                       int64_t d, float* kt) {
    PackKeyWords<kPack>(len, lp, ldk, d, kt,
                        [&](int64_t j, int64_t c) { return _mm512_loadu_ps(k + j * ld + c); });
  }

  static void PackValues(const uint16_t* v, int64_t ld, int64_t len, int64_t d, float* vp) {
    for (int64_t w = 0; 2 * w < len; ++w) {
      const uint16_t* a = v + 2 * w * ld;
      const bool has_b = 2 * w + 1 < len;
      for (int64_t c = 0; c < d; c += 16) {
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + c));
        const __m256i hi = has_b ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + ld + c))
                                 : _mm256_setzero_si256();
        _mm512_storeu_ps(vp + w * d + c,
                         InterleaveHalves(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)));
      }
    }
  }

  static void PackQuery(const uint16_t* q, int64_t d, float scale, float* qs) {
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int64_t c = 0; c < d; c += 32) {
      _mm512_storeu_ps(qs + c / 2, PackPairs(_mm512_mul_ps(WidenBf16(Load16(q + c)), vscale),
                                             _mm512_mul_ps(WidenBf16(Load16(q + c + 16)), vscale)));
    }
  }

  // Rounded to bf16 (nearest even), 32 values to a line; streamed where the
  // row starts a line, as StoreRowF32.
  static void StoreRow(const float* os, float inv, int64_t d, uint16_t* o) {
    const __m512 f = _mm512_set1_ps(inv);
    const bool whole_lines = reinterpret_cast<uintptr_t>(o) % 64 == 0;
    for (int64_t c = 0; c < d; c += 32) {
      const __m512i v =
          _mm512_castps_si512(PackPairs(_mm512_mul_ps(_mm512_loadu_ps(os + c), f),
                                        _mm512_mul_ps(_mm512_loadu_ps(os + c + 16), f)));
      if (whole_lines) {
        _mm512_stream_si512(reinterpret_cast<__m512i*>(o + c), v);
      } else {
        _mm512_storeu_si512(o + c, v);
      }
    }
  }
};

}  // namespace

void AttentionRowsAvx512Bf16(const float* qkv, int64_t seq_begin, int64_t len, int64_t head,
                             int64_t heads, int64_t d, float scale, int64_t row_begin,
                             int64_t row_end, int64_t sub_rows, float* out, BiasRows bias,
                             const AttentionItem* next) {
  AttentionRowsBlocked<Bf16Format>(qkv, seq_begin, len, head, heads, d, scale, row_begin, row_end,
                                   sub_rows, out, bias, next);
}

void AttentionRowsAvx512Bf16Values(const uint16_t* qkv, int64_t seq_begin, int64_t len,
                                   int64_t head, int64_t heads, int64_t d, float scale,
                                   int64_t row_begin, int64_t row_end, int64_t sub_rows,
                                   uint16_t* out, BiasRows bias, const AttentionItem* next) {
  AttentionRowsBlocked<Bf16ValuesFormat>(qkv, seq_begin, len, head, heads, d, scale, row_begin,
                                         row_end, sub_rows, out, bias, next);
}

}  // namespace encoderd::kernels
