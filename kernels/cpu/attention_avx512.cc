// Compiled with -mavx512f (kernels/CMakeLists.txt; GCC and clang alike) and
// called only when the CPU has AVX-512. Uses no standard-library templates, so no AVX-512
// instantiation of a shared inline function can leak into generic code.
#include "kernels/cpu/attention_avx512.h"

// GCC 12 reports the _mm512_undefined_* inside its own intrinsic headers as
// uninitialised (GCC bug 105593); the warning says nothing about this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <type_traits>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/avx512_math.h"

namespace encoderd::kernels {
namespace {

constexpr int kRows = 4;             // query rows per register block
constexpr int64_t kValueBlock = 64;  // rows of V reused from L1 across a sub-block

// In-register transpose of a 16 x 16 tile: r[i][j] becomes r[j][i].
inline void Transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  _Pragma("GCC unroll 8") for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  _Pragma("GCC unroll 4") for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  _Pragma("GCC unroll 4") for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xdd);
    t[8 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xdd);
  }
  _Pragma("GCC unroll 8") for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
  }
}

// kt[c][j] = k[j][c] for j < len, 0 for len <= j < lp; k rows at stride ld.
void TransposeKeys(const float* k, int64_t ld, int64_t len, int64_t lp, int64_t d, float* kt) {
  for (int64_t j0 = 0; j0 < lp; j0 += 16) {
    for (int64_t c0 = 0; c0 < d; c0 += 16) {
      __m512 r[16];
      _Pragma("GCC unroll 16") for (int i = 0; i < 16; ++i) r[i] =
          j0 + i < len ? _mm512_loadu_ps(k + (j0 + i) * ld + c0) : _mm512_setzero_ps();
      Transpose16(r);
      _Pragma("GCC unroll 16") for (int i = 0; i < 16; ++i)
          _mm512_storeu_ps(kt + (c0 + i) * lp + j0, r[i]);
    }
  }
}

// p = exp(s - max(s)) over the first len entries, in place; returns 1 / sum(p).
float SoftmaxRow(float* s, int64_t len) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
  const __mmask16 tail = static_cast<__mmask16>((1u << (len - j)) - 1);
  vmax = _mm512_mask_max_ps(vmax, tail, vmax, _mm512_maskz_loadu_ps(tail, s + j));
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (j = 0; j + 16 <= len; j += 16) {
    const __m512 p = ExpNonPositive(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
    _mm512_storeu_ps(s + j, p);
    vsum = _mm512_add_ps(vsum, p);
  }
  if (tail) {
    const __m512 p = ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + j), m));
    _mm512_mask_storeu_ps(s + j, tail, p);
    vsum = _mm512_mask_add_ps(vsum, tail, vsum, p);
  }
  return 1.f / _mm512_reduce_add_ps(vsum);
}

// s[r][j0 .. j0 + 16 * NJ) = q[r] . kt[:, j] for r < R; q rows contiguous
// [R, d], kt [d, lp], s rows at stride lp.
template <int R, int NJ>
void ScoresTile(const float* q, const float* kt, int64_t d, int64_t lp, int64_t j0, float* s) {
  __m512 acc[R][NJ];
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int v = 0; v < NJ; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t c = 0; c < d; ++c) {
    __m512 k[NJ];
    _Pragma("GCC unroll 8") for (int v = 0; v < NJ; ++v) k[v] =
        _mm512_loadu_ps(kt + c * lp + j0 + 16 * v);
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(q[r * d + c]);
      _Pragma("GCC unroll 8") for (int v = 0; v < NJ; ++v) acc[r][v] =
          _mm512_fmadd_ps(b, k[v], acc[r][v]);
    }
  }
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int v = 0; v < NJ; ++v)
          _mm512_storeu_ps(s + r * lp + j0 + 16 * v, acc[r][v]);
}

// o[r][0 .. 16 * NV) += sum_{j0 <= j < j1} p[r][j] * v[j][0 .. 16 * NV) for
// r < R; p rows at stride lp, v rows at stride ldv, o rows at stride ldo.
template <int R, int NV>
void ValuesTile(const float* p, int64_t lp, const float* v, int64_t ldv, int64_t j0, int64_t j1,
                float* o, int64_t ldo) {
  __m512 acc[R][NV];
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int c = 0; c < NV; ++c) acc[r][c] =
          _mm512_loadu_ps(o + r * ldo + 16 * c);
  for (int64_t j = j0; j < j1; ++j) {
    __m512 vj[NV];
    _Pragma("GCC unroll 8") for (int c = 0; c < NV; ++c) vj[c] =
        _mm512_loadu_ps(v + j * ldv + 16 * c);
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(p[r * lp + j]);
      _Pragma("GCC unroll 8") for (int c = 0; c < NV; ++c) acc[r][c] =
          _mm512_fmadd_ps(b, vj[c], acc[r][c]);
    }
  }
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int c = 0; c < NV; ++c)
          _mm512_storeu_ps(o + r * ldo + 16 * c, acc[r][c]);
}

template <int R>
void ValueRows(const float* p, int64_t lp, const float* vs, int64_t d, int64_t j0, int64_t j1,
               float* o) {
  int64_t c = 0;
  for (; c + 64 <= d; c += 64) ValuesTile<R, 4>(p, lp, vs + c, d, j0, j1, o + c, d);
  switch ((d - c) / 16) {
    case 3:
      ValuesTile<R, 3>(p, lp, vs + c, d, j0, j1, o + c, d);
      break;
    case 2:
      ValuesTile<R, 2>(p, lp, vs + c, d, j0, j1, o + c, d);
      break;
    case 1:
      ValuesTile<R, 1>(p, lp, vs + c, d, j0, j1, o + c, d);
      break;
    default:
      break;
  }
}

// Calls fn(std::integral_constant<int, R>(), first_row) for consecutive
// blocks of R <= kRows rows covering [0, rows).
template <typename Fn>
void ForRowBlocks(int64_t rows, Fn&& fn) {
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) fn(std::integral_constant<int, kRows>(), r);
  switch (rows - r) {
    case 3:
      fn(std::integral_constant<int, 3>(), r);
      break;
    case 2:
      fn(std::integral_constant<int, 2>(), r);
      break;
    case 1:
      fn(std::integral_constant<int, 1>(), r);
      break;
    default:
      break;
  }
}

}  // namespace

void AttentionRowsAvx512(const float* qkv, int64_t seq_begin, int64_t len, int64_t head,
                         int64_t heads, int64_t d, float scale, int64_t row_begin, int64_t row_end,
                         int64_t sub_rows, float* out) {
  const int64_t hidden = heads * d, ld = 3 * hidden;
  const int64_t lp = (len + 15) / 16 * 16;
  // Scratch: K^T [d, lp], V [len, d], scores [sub_rows, lp], Q and O [sub_rows, d], 1/sum
  // [sub_rows].
  float* kt = AttentionScratch(d * lp + len * d + sub_rows * (lp + 2 * d + 1));
  float* vs = kt + d * lp;
  float* s = vs + len * d;
  float* qs = s + sub_rows * lp;
  float* os = qs + sub_rows * d;
  float* inv = os + sub_rows * d;
  const float* q = qkv + seq_begin * ld + head * d;
  const float* k = q + hidden;
  const float* v = q + 2 * hidden;
  TransposeKeys(k, ld, len, lp, d, kt);
  for (int64_t j = 0; j < len; ++j) {
    for (int64_t c = 0; c < d; c += 16) {
      _mm512_storeu_ps(vs + j * d + c, _mm512_loadu_ps(v + j * ld + c));
    }
  }
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t i0 = row_begin; i0 < row_end; i0 += sub_rows) {
    const int64_t rows = row_end - i0 < sub_rows ? row_end - i0 : sub_rows;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < d; c += 16) {
        _mm512_storeu_ps(qs + r * d + c,
                         _mm512_mul_ps(_mm512_loadu_ps(q + (i0 + r) * ld + c), vscale));
        _mm512_storeu_ps(os + r * d + c, _mm512_setzero_ps());
      }
    }
    // Column blocks outside, row blocks inside: each K^T block (d x 64) is
    // reused from L1 by every row of the sub-block.
    int64_t j = 0;
    for (; j + 64 <= lp; j += 64) {
      ForRowBlocks(rows, [&](auto rb, int64_t r) {
        ScoresTile<decltype(rb)::value, 4>(qs + r * d, kt, d, lp, j, s + r * lp);
      });
    }
    for (; j < lp; j += 16) {
      ForRowBlocks(rows, [&](auto rb, int64_t r) {
        ScoresTile<decltype(rb)::value, 1>(qs + r * d, kt, d, lp, j, s + r * lp);
      });
    }
    for (int64_t r = 0; r < rows; ++r) inv[r] = SoftmaxRow(s + r * lp, len);
    for (int64_t j0 = 0; j0 < len; j0 += kValueBlock) {
      const int64_t j1 = j0 + kValueBlock < len ? j0 + kValueBlock : len;
      ForRowBlocks(rows, [&](auto rb, int64_t r) {
        ValueRows<decltype(rb)::value>(s + r * lp, lp, vs, d, j0, j1, os + r * d);
      });
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* o = out + (seq_begin + i0 + r) * hidden + head * d;
      const __m512 f = _mm512_set1_ps(inv[r]);
      for (int64_t c = 0; c < d; c += 16)
        _mm512_storeu_ps(o + c, _mm512_mul_ps(_mm512_loadu_ps(os + r * d + c), f));
    }
  }
}

}  // namespace encoderd::kernels
