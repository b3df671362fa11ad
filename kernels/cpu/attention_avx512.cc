// Compiled with -mavx512f (kernels/CMakeLists.txt; GCC and clang alike) and
// called only when the CPU has AVX-512. Uses no standard-library templates, so no AVX-512
// instantiation of a shared inline function can leak into generic code.
#include "kernels/cpu/attention_avx512.h"

#include <immintrin.h>

#include "kernels/cpu/attention_avx512_blocks.h"

namespace encoderd::kernels {
namespace {

// Operands as fp32 values, multiplied with FMA (see attention_avx512_blocks.h).
struct Fp32Format {
  using Value = float;
  static constexpr int64_t kPack = 1;

  static __m512 Madd(__m512 acc, __m512 a, __m512 b) { return _mm512_fmadd_ps(a, b, acc); }

  // kt[c][j] = k[j][c] for j < len, 0 for len <= j < lp; k rows at stride ld,
  // kt's at stride ldk.
  static void PackKeys(const float* k, int64_t ld, int64_t len, int64_t lp, int64_t ldk, int64_t d,
                       float* kt) {
    PackKeyWords<kPack>(len, lp, ldk, d, kt,
                        [&](int64_t j, int64_t c) { return _mm512_loadu_ps(k + j * ld + c); });
  }

  static void PackValues(const float* v, int64_t ld, int64_t len, int64_t d, float* vs) {
    for (int64_t j = 0; j < len; ++j) {
      for (int64_t c = 0; c < d; c += 16) {
        _mm512_storeu_ps(vs + j * d + c, _mm512_loadu_ps(v + j * ld + c));
      }
    }
  }

  static void PackQuery(const float* q, int64_t d, float scale, float* qs) {
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int64_t c = 0; c < d; c += 16) {
      _mm512_storeu_ps(qs + c, _mm512_mul_ps(_mm512_loadu_ps(q + c), vscale));
    }
  }

  static void StoreRow(const float* os, float inv, int64_t d, float* o) {
    StoreRowF32(os, inv, d, o);
  }
};

}  // namespace

void AttentionRowsAvx512(const float* qkv, int64_t seq_begin, int64_t len, int64_t head,
                         int64_t heads, int64_t d, float scale, int64_t row_begin, int64_t row_end,
                         int64_t sub_rows, float* out, BiasRows bias, const AttentionItem* next) {
  AttentionRowsBlocked<Fp32Format>(qkv, seq_begin, len, head, heads, d, scale, row_begin, row_end,
                                   sub_rows, out, bias, next);
}

}  // namespace encoderd::kernels
