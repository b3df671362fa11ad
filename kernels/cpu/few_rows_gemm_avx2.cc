// Compiled with -mavx2 -mfma (kernels/CMakeLists.txt) and called only when
// the CPU has both. Defines no inline function with external linkage, so no
// AVX2 copy of a shared function can be chosen for generic code.
//
// The few-row kernels of a CPU without AVX-512 (few_rows_gemm_avx512.h):
// weights by columns, each column's inputs contiguous, a block of 4 columns
// at a time (ColumnTile), 8 inputs to a register and 8 lanes to each sum,
// the lanes added once at the end; no broadcasts. Two formats:
// - F32Columns: fp32 weights as torch keeps them, [n][k] (oneDNN's `ba`).
//   In oneDNN's own AVX2 layout, [k][n], a group's step is 256 bytes of a
//   row n floats long, and the best order of reads found streamed at
//   17.2-17.6 GB/s; a thread's columns of [n][k] are one stretch of memory
//   (docs/architecture.md, "Few rows", has the figures).
// - Bf16Columns: bf16 weights in the same order, each 16 inputs stored as
//   inputs 0-3, 8-11, 4-7, 12-15 (PackBf16Columns, linear_cpu.cc), so that
//   AVX2's in-lane unpacks with zero, each with its load folded in, widen
//   16 bf16 values into inputs 0-7 and 8-15 as fp32: one instruction a
//   register. Until 2026-12-08 they
//   were widened from the AVX-512 kernels' layout (groups of 64 columns,
//   inputs in pairs), each register by a shift or a mask, for tiles that
//   broadcast every input: 32-34 GFLOP/s at 10 rows on one thread of a Zen
//   1 EPYC with the weights in cache, where these tiles reach 39
//   (docs/architecture.md, "Few rows").
#include <immintrin.h>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/few_rows_gemm_avx512.h"

namespace encoderd::kernels {
namespace {

// Row m's 8 columns from col on, `left` of which exist if positive, through
// the epilogue (few_rows_gemm_avx512.h: bias, residual, then GELU or ReLU).
inline void Finish(__m256 v, const FewRowsEpilogue& e, int64_t m, int64_t n, int64_t col,
                   int64_t left, float* out) {
  if (left <= 0) return;
  if (e.bias) v = _mm256_add_ps(v, LoadFirst(e.bias + col, left));
  if (e.residual) v = _mm256_add_ps(v, LoadFirst(e.residual + m * n + col, left));
  if (e.gelu) v = GeluErf(v);
  if (e.relu) v = _mm256_max_ps(v, _mm256_setzero_ps());
  StoreFirst(out + m * n + col, left, v);
}

// A tile takes kColumns columns by up to Format::kRows rows over all of k,
// Format::kHalves x 8 inputs a step, 8 at a time; each accumulator lane
// sums the inputs of its lane in their order (FMA chains), and then the
// lanes are added in one order: ((l0 + l1) + (l2 + l3)) + ((l4 + l5) +
// (l6 + l7)). Inputs past k (the last step's, read through masks) count
// as 0 x 0. Both formats give the same sums on the same (bf16-rounded)
// values.
constexpr int kColumns = 4;

// fp32 weights [n][k], no padding: the last step's weights through masks.
struct F32Columns {
  using Weight = float;
  // 12 accumulators, the rows' inputs and one weight vector of AVX2's 16
  // registers: 3-row tiles run at the fp32 peak, 1- and 2-row ones at
  // three quarters to four fifths of it (one thread, weights in cache,
  // Zen 1), so 4 rows go as 3 + 1, not 2 + 2.
  static constexpr int64_t kRows = 3;
  static constexpr int kHalves = 1;               // 8 inputs a step
  static int64_t Stride(int64_t k) { return k; }  // between columns, in weights
  // Inputs [i + 8 * half, + 8) of the column at w (its inputs from i on);
  // `left` of them exist if under 8.
  static __m256 Load(const float* w, int half, int64_t left) {
    return left >= 8 ? _mm256_loadu_ps(w + 8 * half)
                     : _mm256_maskload_ps(w + 8 * half, FirstLanes(left));
  }
};

// bf16 weights [n][k16] (PackBf16Columns): each 16 inputs as 0-3, 8-11,
// 4-7, 12-15, zeros past k. 8 accumulators, 2 rows' inputs, a weight and
// zero: in a scratch program (one thread, weights in cache, Zen 1, 12
// rows) 42 GFLOP/s, where 3 rows by 4 columns (17 registers) ran at 34, 3
// by 3 at 37 and 4 by 2 at 36; in gemm_bench --in-cache-rows 1, 39-40 at
// 8-24 rows.
struct Bf16Columns {
  using Weight = uint16_t;
  static constexpr int64_t kRows = 2;
  static constexpr int kHalves = 2;  // 16 inputs a step: 32 bytes a column
  static int64_t Stride(int64_t k) { return FewRowsBf16ColumnsInputs(k); }
  static __m256 Load(const uint16_t* w, int half, int64_t /*left: zeros past k*/) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    const __m256i zero = _mm256_setzero_si256();
    return _mm256_castsi256_ps(half == 0 ? _mm256_unpacklo_epi16(zero, raw)
                                         : _mm256_unpackhi_epi16(zero, raw));
  }
};

// What a column tile prefetches into L2: lines at address `at` + 64 * l
// for l < `lines`, one for each 8 inputs (an address: past the last column
// it lies outside the weights, which a prefetch may).
struct Lines {
  uintptr_t at;
  int64_t lines;
};

// The sums of rows [0, kRows) of x (ldx floats apart) with kCols columns
// from w on (Format::Stride(k) weights apart), into sums[r * lds + c].
template <class Format, int kRows, int kCols>
void ColumnTile(const float* x, int64_t ldx, const typename Format::Weight* w, int64_t k,
                Lines ahead, float* sums, int64_t lds) {
  const int64_t stride = Format::Stride(k);
  __m256 acc[kRows][kColumns];
#pragma GCC unroll 3
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < kColumns; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  // Half `half` of the step at input i, `left` inputs of it existing.
  const auto half_step = [&](int64_t i, int half, int64_t left) {
    __m256 xv[kRows];
#pragma GCC unroll 3
    for (int r = 0; r < kRows; ++r) xv[r] = LoadFirst(x + r * ldx + i + 8 * half, left);
#pragma GCC unroll 4
    for (int c = 0; c < kCols; ++c) {
      const __m256 wv = Format::Load(w + c * stride + i, half, left);
#pragma GCC unroll 3
      for (int r = 0; r < kRows; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  };
  constexpr int kHalves = Format::kHalves;
  int64_t i = 0, line = 0;
  for (; i + 8 * kHalves <= k; i += 8 * kHalves, line += kHalves) {
    if (line < ahead.lines) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead.at + 64 * line), _MM_HINT_T1);
      if (kHalves == 2 && line + 1 < ahead.lines)
        _mm_prefetch(reinterpret_cast<const char*>(ahead.at + 64 * line + 64), _MM_HINT_T1);
    }
    half_step(i, 0, 8);
    if constexpr (kHalves == 2) half_step(i, 1, 8);
  }
  if (i < k) half_step(i, 0, k - i);
  if (kHalves == 2 && i + 8 < k) half_step(i, 1, k - i - 8);
#pragma GCC unroll 3
  for (int r = 0; r < kRows; ++r) {
    // Lanes 0-3 of h: columns 0-3's (l0 + l1) + (l2 + l3); lanes 4-7: their
    // (l4 + l5) + (l6 + l7).
    const __m256 h =
        _mm256_hadd_ps(_mm256_hadd_ps(acc[r][0], acc[r][1]), _mm256_hadd_ps(acc[r][2], acc[r][3]));
    const __m128 total = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    if (kCols == kColumns) {
      _mm_storeu_ps(sums + r * lds, total);
    } else {
      alignas(16) float lanes[4];
      _mm_store_ps(lanes, total);
      for (int c = 0; c < kCols; ++c) sums[r * lds + c] = lanes[c];
    }
  }
}

template <class Format>
using ColumnTileFn = void (*)(const float*, int64_t, const typename Format::Weight*, int64_t, Lines,
                              float*, int64_t);
// The tiles of 1 to kRows rows by 1 to kColumns columns.
template <class Format, int kRows>
constexpr ColumnTileFn<Format> kWidths[kColumns] = {
    ColumnTile<Format, kRows, 1>, ColumnTile<Format, kRows, 2>, ColumnTile<Format, kRows, 3>,
    ColumnTile<Format, kRows, 4>};
template <class Format>
constexpr const ColumnTileFn<Format>* kColumnTiles[3] = {
    kWidths<Format, 1>, kWidths<Format, 2 <= Format::kRows ? 2 : 1>,
    kWidths<Format, 3 <= Format::kRows ? 3 : 1>};

// The column groups [group_begin, group_end) of out (few_rows_gemm_avx512.h)
// for up to kMaxRows rows.
template <class Format>
void ColumnGemm(const float* x, int64_t rows, int64_t ldx, const typename Format::Weight* packed,
                int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                const FewRowsEpilogue& epilogue, float* out) {
  constexpr int64_t kMaxRows = kFewRowsMax;
  static_assert(kFewRowsF32Avx2MaxRows <= kMaxRows, "the sums below");
  if (rows < 1 || rows > kMaxRows) return;  // not a call these kernels take
  const int64_t stride = Format::Stride(k);
  const int64_t c0 = group_begin * kFewRowsGroupColumns;
  const int64_t c1 = group_end * kFewRowsGroupColumns < n ? group_end * kFewRowsGroupColumns : n;
  // Blocks of Format::kRows rows, the last one possibly smaller.
  const int64_t blocks = (rows + Format::kRows - 1) / Format::kRows;
  const int64_t first = rows < Format::kRows ? rows : Format::kRows;
  // A block of columns (kColumns columns, contiguous) is read from memory
  // by the first block of rows and from cache by the others; each block of
  // rows prefetches its share of the next block of columns into L2, so
  // memory streams throughout (past the last column, lines outside the
  // weights: a prefetch never faults).
  const int64_t block_bytes =
      kColumns * stride * static_cast<int64_t>(sizeof(typename Format::Weight));
  const int64_t next_lines = (block_bytes + 63) / 64;
  const int64_t share = (next_lines + blocks - 1) / blocks;
  // The sums of a stretch of columns wait here for the epilogue, which may
  // read the residual from out itself.
  constexpr int64_t kStretch = 128;
  alignas(32) float sums[kMaxRows * kStretch];
  for (int64_t s0 = c0; s0 < c1; s0 += kStretch) {
    const int64_t cols = c1 - s0 < kStretch ? c1 - s0 : kStretch;
    for (int64_t col = s0; col < s0 + cols; col += kColumns) {
      const int64_t width = s0 + cols - col < kColumns ? s0 + cols - col : kColumns;
      const typename Format::Weight* w = packed + col * stride;
      const uintptr_t next = reinterpret_cast<uintptr_t>(w) + block_bytes;
      for (int64_t r0 = 0, b = 0; r0 < rows; r0 += first, ++b) {
        const int64_t block = rows - r0 < first ? rows - r0 : first;
        const int64_t from = b * share < next_lines ? b * share : next_lines;
        const Lines ahead{next + 64 * from, next_lines - from < share ? next_lines - from : share};
        kColumnTiles<Format>[block - 1][width - 1](x + r0 * ldx, ldx, w, k, ahead,
                                                   sums + r0 * kStretch + (col - s0), kStretch);
      }
    }
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t c = 0; c < cols; c += 8) {
        const int64_t left = cols - c;
        Finish(LoadFirst(sums + m * kStretch + c, left), epilogue, m, n, s0 + c, left, out);
      }
    }
  }
}

}  // namespace

void FewRowsGemmBf16ColumnsAvx2(const float* x, int64_t rows, int64_t ldx, const uint16_t* packed,
                                int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                                const FewRowsEpilogue& epilogue, float* out) {
  ColumnGemm<Bf16Columns>(x, rows, ldx, packed, n, k, group_begin, group_end, epilogue, out);
}

void FewRowsGemmF32Avx2(const float* x, int64_t rows, int64_t ldx, const float* packed, int64_t n,
                        int64_t k, int64_t group_begin, int64_t group_end,
                        const FewRowsEpilogue& epilogue, float* out) {
  if (rows > kFewRowsF32Avx2MaxRows) return;  // not a call it takes
  ColumnGemm<F32Columns>(x, rows, ldx, packed, n, k, group_begin, group_end, epilogue, out);
}

void WidenBf16ColumnsAvx2(const uint16_t* packed, int64_t k, int64_t col_begin, int64_t col_end,
                          float* out) {
  const int64_t stride = FewRowsBf16ColumnsInputs(k);
  for (int64_t c = col_begin; c < col_end; ++c) {
    const uint16_t* w = packed + c * stride;
    float* dst = out + c * k;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      _mm256_storeu_ps(dst + i, Bf16Columns::Load(w + i, 0, 8));
      _mm256_storeu_ps(dst + i + 8, Bf16Columns::Load(w + i, 1, 8));
    }
    if (i < k) StoreFirst(dst + i, k - i, Bf16Columns::Load(w + i, 0, k - i));
    if (i + 8 < k) StoreFirst(dst + i + 8, k - i - 8, Bf16Columns::Load(w + i, 1, k - i - 8));
  }
}

}  // namespace encoderd::kernels
