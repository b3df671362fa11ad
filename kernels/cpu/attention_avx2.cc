// Compiled with -mavx2 -mfma (kernels/CMakeLists.txt) and called only when
// the CPU has both. Uses no standard-library templates, so no AVX2 copy of a
// shared inline function can reach generic code.
//
// The AVX-512 kernel's structure (attention_avx512_blocks.h) on 8-lane
// registers, fp32 only (no AVX2 CPU has bf16 dot products): K transposed
// once per work item, then per sub-block of query rows the scores in 4 x 16
// register tiles (the AVX-512 kernel's are 6 x 64), an exact fp32 softmax,
// and P V in 4 x 16 tiles over 64-row blocks of V.
#include "kernels/cpu/attention_avx2.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/attention_prefetch.h"
#include "kernels/cpu/avx2_math.h"

namespace encoderd::kernels {
namespace {

constexpr int kRows = 4;             // query rows per register tile
constexpr int kCols = 2;             // 8-lane vectors per register tile row
constexpr int64_t kValueBlock = 64;  // rows of V reused from L1 across a sub-block

inline float ReduceMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline float ReduceAdd(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// In-register transpose of an 8 x 8 tile: r[i][j] becomes r[j][i].
inline void Transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

// kt[c][j] = k[j][c] for j < len, 0 for len <= j < lp; k rows at stride ld,
// kt's at stride ldk.
void PackKeys(const float* k, int64_t ld, int64_t len, int64_t lp, int64_t ldk, int64_t d,
              float* kt) {
  for (int64_t j0 = 0; j0 < lp; j0 += 8) {
    for (int64_t c0 = 0; c0 < d; c0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = j0 + i < len ? _mm256_loadu_ps(k + (j0 + i) * ld + c0) : _mm256_setzero_ps();
      }
      Transpose8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(kt + (c0 + i) * ldk + j0, r[i]);
    }
  }
}

// p = exp(s - max(s)) over the first len entries, in place (the entries up
// to the next multiple of 8 are overwritten too); returns 1 / sum(p).
float SoftmaxRow(float* s, int64_t len) {
  const int64_t full = len / 8 * 8;
  const __m256 tail = _mm256_castsi256_ps(FirstLanes(len - full));
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < full; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
  if (full < len) {
    vmax = _mm256_max_ps(
        vmax, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_loadu_ps(s + full), tail));
  }
  const __m256 m = _mm256_set1_ps(ReduceMax(vmax));
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t j = 0; j < full; j += 8) {
    const __m256 p = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
    _mm256_storeu_ps(s + j, p);
    vsum = _mm256_add_ps(vsum, p);
  }
  if (full < len) {
    const __m256 p = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(s + full), m));
    _mm256_storeu_ps(s + full, p);
    vsum = _mm256_add_ps(vsum, _mm256_and_ps(p, tail));
  }
  return 1.f / ReduceAdd(vsum);
}

// s[r][j0 .. j0 + 8 * NJ) = q[r] . k[j] for r < R; q rows of d floats,
// contiguous; kt [d, lp] at row stride ldk; s rows at stride lp.
template <int R, int NJ>
void ScoresTile(const float* q, const float* kt, int64_t d, int64_t ldk, int64_t lp, int64_t j0,
                float* s) {
  __m256 acc[R][NJ];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NJ; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (int64_t c = 0; c < d; ++c) {
    __m256 k[NJ];
#pragma GCC unroll 8
    for (int v = 0; v < NJ; ++v) k[v] = _mm256_loadu_ps(kt + c * ldk + j0 + 8 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 b = _mm256_broadcast_ss(q + r * d + c);
#pragma GCC unroll 8
      for (int v = 0; v < NJ; ++v) acc[r][v] = _mm256_fmadd_ps(b, k[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NJ; ++v) _mm256_storeu_ps(s + r * lp + j0 + 8 * v, acc[r][v]);
  }
}

// o[r][0 .. 8 * kCols) += sum_{j0 <= j < j1} p[r][j] v[j] for r < R; p rows
// at stride lp, v rows and o rows at stride d.
template <int R>
void ValuesTile(const float* p, int64_t lp, const float* v, int64_t d, int64_t j0, int64_t j1,
                float* o) {
  __m256 acc[R][kCols];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < kCols; ++c) acc[r][c] = _mm256_loadu_ps(o + r * d + 8 * c);
  }
  for (int64_t j = j0; j < j1; ++j) {
    __m256 vj[kCols];
#pragma GCC unroll 8
    for (int c = 0; c < kCols; ++c) vj[c] = _mm256_loadu_ps(v + j * d + 8 * c);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 b = _mm256_broadcast_ss(p + r * lp + j);
#pragma GCC unroll 8
      for (int c = 0; c < kCols; ++c) acc[r][c] = _mm256_fmadd_ps(b, vj[c], acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < kCols; ++c) _mm256_storeu_ps(o + r * d + 8 * c, acc[r][c]);
  }
}

// Calls Tile<R>::Run(r, args...) for the block of the last `rest` < kRows
// rows, which starts at r.
template <template <int> class Tile, int R = kRows - 1, typename... Args>
void LastRowBlock(int64_t rest, int64_t r, Args... args) {
  if constexpr (R > 0) {
    if (rest == R) {
      Tile<R>::Run(r, args...);
    } else {
      LastRowBlock<Tile, R - 1>(rest, r, args...);
    }
  }
}

// Calls Tile<R>::Run(first_row, args...) for consecutive blocks of R <=
// kRows rows covering [0, rows).
template <template <int> class Tile, typename... Args>
void ForRowBlocks(int64_t rows, Args... args) {
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) Tile<kRows>::Run(r, args...);
  LastRowBlock<Tile>(rows - r, r, args...);
}

// Score columns [j0, j0 + 8 * kCols) of every row of a sub-block.
template <int R>
struct ScoreColumns {
  static void Run(int64_t r, const float* qs, const float* kt, int64_t d, int64_t ldk, int64_t lp,
                  int64_t j0, float* s) {
    ScoresTile<R, kCols>(qs + r * d, kt, d, ldk, lp, j0, s + r * lp);
  }
};

// P V over rows [j0, j1) of V, every 8 * kCols columns of the output.
template <int R>
struct ValueColumns {
  static void Run(int64_t r, const float* s, int64_t lp, const float* vs, int64_t d, int64_t j0,
                  int64_t j1, float* os) {
    for (int64_t c = 0; c < d; c += 8 * kCols) {
      ValuesTile<R>(s + r * lp, lp, vs + c, d, j0, j1, os + r * d + c);
    }
  }
};

}  // namespace

void AttentionRowsAvx2(const float* qkv, int64_t seq_begin, int64_t len, int64_t head,
                       int64_t heads, int64_t d, float scale, int64_t row_begin, int64_t row_end,
                       int64_t sub_rows, float* out, BiasRows bias, const AttentionItem* next) {
  const int64_t hidden = heads * d, ld = 3 * hidden;
  const int64_t lp = (len + 15) / 16 * 16, ldk = KeyRowStride(lp);
  // Scratch: K^T [d, ldk], V [len, d], scores [sub_rows, lp], Q [sub_rows,
  // d], O [sub_rows, d], 1/sum [sub_rows].
  float* kt = AttentionScratch(d * ldk + len * d + sub_rows * (lp + 2 * d + 1));
  float* vs = kt + d * ldk;
  float* s = vs + len * d;
  float* qs = s + sub_rows * lp;
  float* os = qs + sub_rows * d;
  float* inv = os + sub_rows * d;
  const float* q = qkv + seq_begin * ld + head * d;
  // Step is called once per column block of the scores and block of V.
  const int64_t sub_blocks = (row_end - row_begin + sub_rows - 1) / sub_rows;
  NextItemPrefetch prefetch(
      qkv, sizeof(float), heads, d, seq_begin, head, next,
      sub_blocks * ((lp + 8 * kCols - 1) / (8 * kCols) + (len + kValueBlock - 1) / kValueBlock));
  PackKeys(q + hidden, ld, len, lp, ldk, d, kt);
  for (int64_t j = 0; j < len; ++j) {
    for (int64_t c = 0; c < d; c += 8) {
      _mm256_storeu_ps(vs + j * d + c, _mm256_loadu_ps(q + 2 * hidden + j * ld + c));
    }
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int64_t i0 = row_begin; i0 < row_end; i0 += sub_rows) {
    const int64_t rows = row_end - i0 < sub_rows ? row_end - i0 : sub_rows;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < d; c += 8) {
        _mm256_storeu_ps(qs + r * d + c,
                         _mm256_mul_ps(_mm256_loadu_ps(q + (i0 + r) * ld + c), vscale));
        _mm256_storeu_ps(os + r * d + c, _mm256_setzero_ps());
      }
    }
    // Column blocks outside, row blocks inside: each K block (d x 16) is
    // reused from L1 by every row of the sub-block.
    for (int64_t j = 0; j < lp; j += 8 * kCols) {
      ForRowBlocks<ScoreColumns>(rows, qs, kt, d, ldk, lp, j, s);
      prefetch.Step();
    }
    for (int64_t r = 0; r < rows; ++r) {
      AddBiasRow(s + r * lp, BiasRow(bias, i0 + r), len);
      inv[r] = SoftmaxRow(s + r * lp, len);
    }
    for (int64_t j0 = 0; j0 < len; j0 += kValueBlock) {
      const int64_t j1 = j0 + kValueBlock < len ? j0 + kValueBlock : len;
      ForRowBlocks<ValueColumns>(rows, s, lp, vs, d, j0, j1, os);
      prefetch.Step();
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* o = out + (seq_begin + i0 + r) * hidden + head * d;
      const __m256 f = _mm256_set1_ps(inv[r]);
      // Streamed past the caches where the row starts a cache line (as the
      // AVX-512 kernels do: d % 16 == 0, so the row is whole lines).
      const bool whole_lines = reinterpret_cast<uintptr_t>(o) % 64 == 0;
      for (int64_t c = 0; c < d; c += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(os + r * d + c), f);
        if (whole_lines) {
          _mm256_stream_ps(o + c, v);
        } else {
          _mm256_storeu_ps(o + c, v);
        }
      }
    }
  }
}

}  // namespace encoderd::kernels
