// Compiled with -mavx512f (kernels/CMakeLists.txt) and called only when the
// CPU has AVX-512. Uses no standard-library templates, so no AVX-512
// instantiation of a shared inline function can leak into generic code.
#include "kernels/cpu/disentangled_avx512.h"

#include <immintrin.h>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/avx512_math.h"

namespace encoderd::kernels {
namespace {

// y[r][w] = sum_c x[r][c] t[c][w] for r < R and the 16 x NV columns from w0
// (the last vector's lanes under `tail` only): x rows ld apart, t rows
// `columns` apart, y rows `width` apart. The sum runs over c in order.
template <int R, int NV>
inline void ProjectTile(const float* x, int64_t ld, int64_t d, const float* t, int64_t columns,
                        int64_t w0, __mmask16 tail, float* y, int64_t width) {
  __m512 acc[R][NV];
  _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t c = 0; c < d; ++c) {
    __m512 tv[NV];
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {
      const __mmask16 lanes = v == NV - 1 ? tail : static_cast<__mmask16>(0xffff);
      tv[v] = _mm512_maskz_loadu_ps(lanes, t + c * columns + w0 + 16 * v);
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(x[r * ld + c]);
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) acc[r][v] =
          _mm512_fmadd_ps(a, tv[v], acc[r][v]);
    }
  }
  _Pragma("GCC unroll 4") for (int r = 0; r < R; ++r)
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; ++v) {
    const __mmask16 lanes = v == NV - 1 ? tail : static_cast<__mmask16>(0xffff);
    _mm512_mask_storeu_ps(y + r * width + w0 + 16 * v, lanes, acc[r][v]);
  }
}

// ProjectTile over columns [begin, end) for R rows: blocks of 64 columns,
// then one tile of the 1-4 vectors left.
template <int R>
inline void ProjectRows(const float* x, int64_t ld, int64_t d, const float* t, int64_t columns,
                        int64_t begin, int64_t end, float* y, int64_t width) {
  int64_t w = begin;
  for (; w + 64 <= end; w += 64) {
    ProjectTile<R, 4>(x, ld, d, t, columns, w, 0xffff, y, width);
  }
  const int64_t left = end - w;
  if (left <= 0) return;
  const __mmask16 tail = FirstLanes(left - (left - 1) / 16 * 16);
  switch ((left + 15) / 16) {
    case 4:
      ProjectTile<R, 4>(x, ld, d, t, columns, w, tail, y, width);
      break;
    case 3:
      ProjectTile<R, 3>(x, ld, d, t, columns, w, tail, y, width);
      break;
    case 2:
      ProjectTile<R, 2>(x, ld, d, t, columns, w, tail, y, width);
      break;
    default:
      ProjectTile<R, 1>(x, ld, d, t, columns, w, tail, y, width);
      break;
  }
}

// y[r][w] = x_r . t[w] for n rows x, over the band of columns
// [band(r0, r1).first, band(r0, r1).second) the rows [r0, r1) of a block
// read (the rest of y is not written).
template <typename Band>
void Project(const float* x, int64_t ld, int64_t n, int64_t d, const float* t, int64_t columns,
             int64_t width, float* y, const Band& band) {
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) {
    const auto [begin, end] = band(r, r + 4);
    ProjectRows<4>(x + r * ld, ld, d, t, columns, begin, end, y + r * width, width);
  }
  for (; r < n; ++r) {
    const auto [begin, end] = band(r, r + 1);
    ProjectRows<1>(x + r * ld, ld, d, t, columns, begin, end, y + r * width, width);
  }
}

}  // namespace

void DisentangledRowsAvx512(const DisentangledBias& b, const float* q, const float* k, int64_t ld,
                            int64_t len, int64_t head, int64_t head_dim, int64_t row_begin,
                            int64_t row_end, float* out) {
  const int64_t rows = row_end - row_begin;
  const DisentangledWindow window = WindowOf(b, len, row_begin, row_end);
  const int64_t lo = window.lo, width = window.width;
  // (The item's row kernel takes the scratch over once this returns.)
  float* c2p = AttentionScratch((rows + len) * width);
  float* p2c = c2p + rows * width;
  const int64_t table = head * head_dim * b.columns + lo;
  // Only the columns each block of rows reads: query rows [r0, r1) those of
  // keys 0 to len - 1, keys [j0, j1) those of the item's rows (the index
  // does not decrease), against the whole window for every row (half the
  // work where an item holds a whole sequence).
  const int32_t* at = b.index + b.center;
  struct Columns {
    int64_t begin, end;
  };
  Project(q + row_begin * ld, ld, rows, head_dim, b.key + table, b.columns, width, c2p,
          [&](int64_t r0, int64_t r1) {
            return Columns{at[row_begin + r0 - (len - 1)] - lo, at[row_begin + r1 - 1] + 1 - lo};
          });
  Project(k, ld, len, head_dim, b.query + table, b.columns, width, p2c,
          [&](int64_t j0, int64_t j1) {
            return Columns{at[row_begin - (j1 - 1)] - lo, at[row_end - 1 - j0] + 1 - lo};
          });
  // out[r][j] = c2p[r][col] + p2c[j][col], col = index[center + i - j] - lo:
  // 16 keys at a time, their columns read backwards from the index.
  const __m512i reverse = _mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i key_rows =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int>(width)));
  const __m512i vlo = _mm512_set1_epi32(static_cast<int>(lo));
  for (int64_t r = 0; r < rows; ++r) {
    // index[center + i - j] for j = j0 + 15 ... j0 at ends[j0 - 15 ... j0].
    const int32_t* ends = b.index + b.center + row_begin + r;
    const float* c2p_row = c2p + r * width;
    float* o = out + r * len;
    for (int64_t j = 0; j < len; j += 16) {
      const int64_t keys = len - j < 16 ? len - j : 16;
      const __mmask16 lanes = FirstLanes(keys);
      // Lane t: key j + t, whose column is at ends[-(j + t)]; loaded from
      // ends[-j - 15] on, of which only the last `keys` are read.
      const __m512i backwards = _mm512_mask_loadu_epi32(
          _mm512_setzero_si512(), static_cast<__mmask16>(lanes << (16 - keys)), ends - j - 15);
      const __m512i col = _mm512_sub_epi32(_mm512_permutexvar_epi32(reverse, backwards), vlo);
      const __m512 a = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), lanes, col, c2p_row, 4);
      const __m512 p = _mm512_mask_i32gather_ps(
          _mm512_setzero_ps(), lanes, _mm512_add_epi32(col, key_rows), p2c + j * width, 4);
      _mm512_mask_storeu_ps(o + j, lanes, _mm512_add_ps(a, p));
    }
  }
}

}  // namespace encoderd::kernels
