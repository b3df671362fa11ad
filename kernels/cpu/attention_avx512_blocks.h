// The blocked attention rows shared by the fp32 and bf16 AVX-512 kernels
// (attention_avx512.cc, attention_avx512_bf16.cc): the loops, register tiles
// and softmax, over operands in a Format the kernel supplies. Include only
// from files compiled with -mavx512f; everything here has internal linkage,
// so no AVX-512 copy can be chosen for generic code.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/attention_prefetch.h"
#include "kernels/cpu/avx512_math.h"

namespace encoderd::kernels {
namespace {

// Query rows per register block: 6 rows by 64 columns (24 accumulators of
// the 32 registers, with 4 of keys or values and a broadcast). 4 rows
// before 2026-12-07: kernels/bench/attention_bench (fp32, 2 threads, an
// Ice Lake VM, the two builds alternated 3 times) 32 x U[16, 256] 13.0-14.4
// -> 12.6-12.8 ms, 4 x 512 19.7-20.0 -> 18.5 ms; the same bits (each
// sum over the same words in the same order).
constexpr int kRows = 6;
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

// kt[w][j] = word w of key j for j < len, 0 for len <= j < lp, over the
// d / kPack words of each key (kt's rows ldk words apart), a 16 x 16 tile at a time (a Format's
// PackKeys): load(j, c) gives key j's 16 words from head-dim column c on.
template <int64_t kPack, typename Load>
inline void PackKeyWords(int64_t len, int64_t lp, int64_t ldk, int64_t d, float* kt, Load load) {
  for (int64_t j0 = 0; j0 < lp; j0 += 16) {
    for (int64_t c0 = 0; c0 < d; c0 += 16 * kPack) {
      __m512 r[16];
      _Pragma("GCC unroll 16") for (int i = 0; i < 16; ++i) r[i] =
          j0 + i < len ? load(j0 + i, c0) : _mm512_setzero_ps();
      Transpose16(r);
      _Pragma("GCC unroll 16") for (int i = 0; i < 16; ++i)
          _mm512_storeu_ps(kt + (c0 / kPack + i) * ldk + j0, r[i]);
    }
  }
}

// The lanes of the 16 entries from j on that are below len.
inline __mmask16 LanesBelow(int64_t len, int64_t j) { return j >= len ? 0 : FirstLanes(len - j); }

// max(s) over the first len entries, in every lane. With `bias` (a query
// row's bias from key 0 on, BiasRow), s[j] += bias[j] first, in the
// same pass.
inline __m512 RowMax(float* s, int64_t len, const float* bias) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  int64_t j = 0;
  const __mmask16 tail = LanesBelow(len, len / 16 * 16);
  if (bias != nullptr) {
    for (; j + 16 <= len; j += 16) {
      const __m512 x = _mm512_add_ps(_mm512_loadu_ps(s + j), _mm512_loadu_ps(bias + j));
      _mm512_storeu_ps(s + j, x);
      vmax = _mm512_max_ps(vmax, x);
    }
    const __m512 x =
        _mm512_add_ps(_mm512_maskz_loadu_ps(tail, s + j), _mm512_maskz_loadu_ps(tail, bias + j));
    _mm512_mask_storeu_ps(s + j, tail, x);
    vmax = _mm512_mask_max_ps(vmax, tail, vmax, x);
  } else {
    for (; j + 16 <= len; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
    vmax = _mm512_mask_max_ps(vmax, tail, vmax, _mm512_maskz_loadu_ps(tail, s + j));
  }
  return _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
}

// p = exp(s - max(s)) over the first len entries, in place (s += bias
// first where there is one: RowMax); returns 1 / sum(p).
inline float SoftmaxRow(float* s, int64_t len, const float* bias) {
  const __m512 m = RowMax(s, len, bias);
  __m512 vsum = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) {
    const __m512 p = ExpNonPositive(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
    _mm512_storeu_ps(s + j, p);
    vsum = _mm512_add_ps(vsum, p);
  }
  const __mmask16 tail = LanesBelow(len, j);
  if (tail) {
    const __m512 p = ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + j), m));
    _mm512_mask_storeu_ps(s + j, tail, p);
    vsum = _mm512_mask_add_ps(vsum, tail, vsum, p);
  }
  return 1.f / _mm512_reduce_add_ps(vsum);
}

// SoftmaxRow's p stored by Format as its words of value pairs (pp, lp /
// kPack words: pairs of consecutive entries, 0 from len on, lp a multiple
// of 16) instead of in place; returns SoftmaxRow's 1 / sum(p), the same
// bits (the same sums in the same order, the lanes from len on adding 0).
template <class Format>
inline float SoftmaxRowPacked(float* s, int64_t len, int64_t lp, float* pp, const float* bias) {
  static_assert(Format::kPack == 2);
  const __m512 m = RowMax(s, len, bias);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < lp; j += 32) {
    const __mmask16 lo = LanesBelow(len, j), hi = LanesBelow(len, j + 16);
    const __m512 p_lo =
        _mm512_maskz_mov_ps(lo, ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(lo, s + j), m)));
    const __m512 p_hi = _mm512_maskz_mov_ps(
        hi, ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(hi, s + j + 16), m)));
    vsum = _mm512_add_ps(vsum, p_lo);
    vsum = _mm512_add_ps(vsum, p_hi);
    _mm512_mask_storeu_ps(pp + j / 2, lp - j >= 32 ? 0xffff : 0x00ff, Format::Words(p_lo, p_hi));
  }
  return 1.f / _mm512_reduce_add_ps(vsum);
}

// fn(std::integral_constant<int, left>(), r) for the one block of
// 0 < left <= R rows left at row r (none for left 0).
template <int R, typename Fn>
inline void LastRowBlock(int64_t left, int64_t r, Fn&& fn) {
  if constexpr (R > 0) {
    if (left == R) {
      fn(std::integral_constant<int, R>(), r);
    } else {
      LastRowBlock<R - 1>(left, r, fn);
    }
  }
}

// Calls fn(std::integral_constant<int, R>(), first_row) for consecutive
// blocks of R <= kRows rows covering [0, rows).
template <typename Fn>
inline void ForRowBlocks(int64_t rows, Fn&& fn) {
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) fn(std::integral_constant<int, kRows>(), r);
  LastRowBlock<kRows - 1>(rows - r, r, fn);
}

// How a kernel stores its matmul operands, and multiplies them. The scratch
// holds 32-bit words, loaded as floats: an fp32 value, or (bf16) a pair of
// values along the summed index. A Format has
//   Value: the type of qkv's and out's values (float, or uint16_t for bf16),
//   kPack: values per word (1 or 2; head_dim % (16 * kPack) == 0),
//   Madd(acc, a, b): acc + a * b over each lane's word pair (a, b floats),
//   PackKeys(k, ld, len, lp, ldk, d, kt): kt [d / kPack, lp] at row stride
//     ldk (KeyRowStride), key j's words at column j, 0 for len <= j < lp,
//   PackValues(v, ld, len, d, vp): vp [ceil(len / kPack), d], the words of
//     kPack consecutive rows (a missing last row 0),
//   PackQuery(q, d, scale, qs): q * scale as d / kPack words,
//   Words(lo, hi), only when kPack > 1: 32 values (lo's 16, then hi's) as
//     16 words of consecutive pairs (SoftmaxRowPacked; kPack == 1 uses the
//     scores as they are).
//   StoreRow(os, inv, d, o): o[c] = os[c] * inv for c < d, as Values (an
//     output row; StoreRowF32 for fp32 ones).

// o[c] = os[c] * inv for c < d, fp32. Whole lines of the output, which an
// item alone writes, are streamed past the caches where the row starts a
// line, so that lines only overwritten are not read first.
inline void StoreRowF32(const float* os, float inv, int64_t d, float* o) {
  const __m512 f = _mm512_set1_ps(inv);
  const bool whole_lines = reinterpret_cast<uintptr_t>(o) % 64 == 0;
  for (int64_t c = 0; c < d; c += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(os + c), f);
    if (whole_lines) {
      _mm512_stream_ps(o + c, v);
    } else {
      _mm512_storeu_ps(o + c, v);
    }
  }
}

// s[r][j0 .. j0 + 16 * NJ) = q[r] . k[j] for r < R; q rows of `words` words,
// contiguous; kt [words, lp] at row stride ldk; s rows at stride lp.
template <class Format, int R, int NJ>
void ScoresTile(const float* q, const float* kt, int64_t words, int64_t ldk, int64_t lp, int64_t j0,
                float* s) {
  __m512 acc[R][NJ];
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int v = 0; v < NJ; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t w = 0; w < words; ++w) {
    __m512 k[NJ];
    _Pragma("GCC unroll 8") for (int v = 0; v < NJ; ++v) k[v] =
        _mm512_loadu_ps(kt + w * ldk + j0 + 16 * v);
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(q[r * words + w]);
      _Pragma("GCC unroll 8") for (int v = 0; v < NJ; ++v) acc[r][v] =
          Format::Madd(acc[r][v], b, k[v]);
    }
  }
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int v = 0; v < NJ; ++v)
          _mm512_storeu_ps(s + r * lp + j0 + 16 * v, acc[r][v]);
}

// o[r][0 .. 16 * NV) += sum_{w0 <= w < w1} p[r] word w . v word w, for r < R;
// p rows at stride pw, vp rows at stride ldv, o rows at stride ldo.
template <class Format, int R, int NV>
void ValuesTile(const float* p, int64_t pw, const float* vp, int64_t ldv, int64_t w0, int64_t w1,
                float* o, int64_t ldo) {
  __m512 acc[R][NV];
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int c = 0; c < NV; ++c) acc[r][c] =
          _mm512_loadu_ps(o + r * ldo + 16 * c);
  for (int64_t w = w0; w < w1; ++w) {
    __m512 vw[NV];
    _Pragma("GCC unroll 8") for (int c = 0; c < NV; ++c) vw[c] =
        _mm512_loadu_ps(vp + w * ldv + 16 * c);
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(p[r * pw + w]);
      _Pragma("GCC unroll 8") for (int c = 0; c < NV; ++c) acc[r][c] =
          Format::Madd(acc[r][c], b, vw[c]);
    }
  }
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 8") for (int c = 0; c < NV; ++c)
          _mm512_storeu_ps(o + r * ldo + 16 * c, acc[r][c]);
}

template <class Format, int R>
void ValueRows(const float* p, int64_t pw, const float* vp, int64_t d, int64_t w0, int64_t w1,
               float* o) {
  int64_t c = 0;
  for (; c + 64 <= d; c += 64) ValuesTile<Format, R, 4>(p, pw, vp + c, d, w0, w1, o + c, d);
  switch ((d - c) / 16) {
    case 3:
      ValuesTile<Format, R, 3>(p, pw, vp + c, d, w0, w1, o + c, d);
      break;
    case 2:
      ValuesTile<Format, R, 2>(p, pw, vp + c, d, w0, w1, o + c, d);
      break;
    case 1:
      ValuesTile<Format, R, 1>(p, pw, vp + c, d, w0, w1, o + c, d);
      break;
    default:
      break;
  }
}

// Query rows [row_begin, row_end) of one (sequence, head): K and V packed
// once into thread-local scratch; then for each sub-block of sub_rows query
// rows, the sub_rows x L scores (register-blocked 6 x 64, each K block reused
// from L1 by the whole sub-block), an exact fp32 softmax, and P V (each
// 64-row block of V reused by the whole sub-block), the bias rows (a
// relative position bias, disentangled terms or masked keys: BiasRows)
// added to the scores in the softmax's first pass (RowMax) where there are
// any. See attention_avx512.h.
template <class Format, typename Value = typename Format::Value>
void AttentionRowsBlocked(const Value* qkv, int64_t seq_begin, int64_t len, int64_t head,
                          int64_t heads, int64_t d, float scale, int64_t row_begin, int64_t row_end,
                          int64_t sub_rows, Value* out, BiasRows bias, const AttentionItem* next) {
  constexpr int64_t pack = Format::kPack;
  const int64_t hidden = heads * d, ld = 3 * hidden;
  const int64_t lp = (len + 15) / 16 * 16;  // a multiple of 16 (and of pack)
  const int64_t ldk = KeyRowStride(lp);
  const int64_t qw = d / pack, pw = lp / pack;  // words per q row, per p row
  const int64_t pp_words = pack == 1 ? 0 : pw;  // fp32 reads p from the scores
  // Scratch, in words: K [qw, ldk], V [pw, d], scores [sub_rows, lp], P
  // [sub_rows, pp_words], Q [sub_rows, qw], O [sub_rows, d], 1/sum [sub_rows].
  float* kt = AttentionScratch(qw * ldk + pw * d + sub_rows * (lp + pp_words + qw + d + 1));
  float* vp = kt + qw * ldk;
  float* s = vp + pw * d;
  float* pp = pack == 1 ? s : s + sub_rows * lp;
  float* qs = s + sub_rows * (lp + pp_words);
  float* os = qs + sub_rows * qw;
  float* inv = os + sub_rows * d;
  const Value* q = qkv + seq_begin * ld + head * d;
  // Step is called once per register block of rows, in the scores and in P V.
  const int64_t row_blocks = RowBlocksInSubBlocks(row_end - row_begin, sub_rows, kRows);
  NextItemPrefetch prefetch(
      qkv, sizeof(Value), heads, d, seq_begin, head, next,
      row_blocks * (lp / 64 + (lp % 64 != 0) + (len + kValueBlock - 1) / kValueBlock));
  Format::PackKeys(q + hidden, ld, len, lp, ldk, d, kt);
  Format::PackValues(q + 2 * hidden, ld, len, d, vp);
  for (int64_t i0 = row_begin; i0 < row_end; i0 += sub_rows) {
    const int64_t rows = row_end - i0 < sub_rows ? row_end - i0 : sub_rows;
    for (int64_t r = 0; r < rows; ++r) {
      Format::PackQuery(q + (i0 + r) * ld, d, scale, qs + r * qw);
      for (int64_t c = 0; c < d; c += 16) _mm512_storeu_ps(os + r * d + c, _mm512_setzero_ps());
    }
    // Column blocks outside, row blocks inside: each K block (qw x 64) is
    // reused from L1 by every row of the sub-block. Keys [j, j + 16 * nj)
    // for every row:
    const auto scores = [&](int64_t j, auto nj) {
      ForRowBlocks(rows, [&](auto rb, int64_t r) {
        ScoresTile<Format, decltype(rb)::value, decltype(nj)::value>(qs + r * qw, kt, qw, ldk, lp,
                                                                     j, s + r * lp);
        prefetch.Step();
      });
    };
    int64_t j = 0;
    for (; j + 64 <= lp; j += 64) scores(j, std::integral_constant<int, 4>());
    // The last 16-48 keys in one tile of as many vectors: 16 keys at a time
    // gave one chain of dependent multiply-adds per row.
    switch ((lp - j) / 16) {
      case 3:
        scores(j, std::integral_constant<int, 3>());
        break;
      case 2:
        scores(j, std::integral_constant<int, 2>());
        break;
      case 1:
        scores(j, std::integral_constant<int, 1>());
        break;
      default:
        break;
    }
    const int64_t p_stride = pack == 1 ? lp : pw;
    for (int64_t r = 0; r < rows; ++r) {
      const float* bias_row = BiasRow(bias, i0 + r);
      if constexpr (pack > 1) {
        inv[r] = SoftmaxRowPacked<Format>(s + r * lp, len, lp, pp + r * pw, bias_row);
      } else {
        inv[r] = SoftmaxRow(s + r * lp, len, bias_row);
      }
    }
    const int64_t len_words = (len + pack - 1) / pack, block = kValueBlock / pack;
    for (int64_t w0 = 0; w0 < len_words; w0 += block) {
      const int64_t w1 = w0 + block < len_words ? w0 + block : len_words;
      ForRowBlocks(rows, [&](auto rb, int64_t r) {
        ValueRows<Format, decltype(rb)::value>(pp + r * p_stride, p_stride, vp, d, w0, w1,
                                               os + r * d);
        prefetch.Step();
      });
    }
    for (int64_t r = 0; r < rows; ++r)
      Format::StoreRow(os + r * d, inv[r], d, out + (seq_begin + i0 + r) * hidden + head * d);
  }
}

}  // namespace
}  // namespace encoderd::kernels
