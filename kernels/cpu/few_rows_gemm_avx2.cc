// Compiled with -mavx2 -mfma (kernels/CMakeLists.txt) and called only when
// the CPU has both. Defines no inline function with external linkage, so no
// AVX2 copy of a shared function can be chosen for generic code.
//
// The few-row kernels of a CPU without AVX-512 (few_rows_gemm_avx512.h), on
// two weight layouts:
// - FewRowsGemmBf16AsF32Avx2: bf16 weights in the few-row kernels' bf16
//   layout (groups of 64 columns, inputs in pairs), widened to fp32 in
//   registers. 16 registers of 8 lanes hold fewer accumulators than
//   AVX-512's 32 of 16, so the rows go in blocks of up to kBlockRows (1-2
//   rows by 32 columns, 3-5 by 16) and a group's 64 columns take several
//   passes (kTiles). The passes go over a chunk of a group's steps at a
//   time: the first block's first pass finds them in L2, prefetched there
//   while earlier chunks ran, and the other passes and blocks read them from
//   L1, so each weight comes from memory once.
// - FewRowsGemmF32Avx2: fp32 weights as torch keeps them, [n][k] (oneDNN's
//   `ba`), a block of 4 columns at a time (ColumnTile). In oneDNN's own
//   AVX2 layout, [k][n], a group's step is 256 bytes of a row n floats
//   long, and the best order of reads found streamed at 17.2-17.6 GB/s; a
//   thread's columns of [n][k] are one stretch of memory
//   (docs/architecture.md, "Few rows", has the figures).
#include <immintrin.h>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/few_rows_gemm_avx512.h"

namespace encoderd::kernels {
namespace {

// A step's 64 columns take 256 bytes (a pair of bf16 inputs each), 32 bytes
// a vector of 8 columns, so a column is 4 bytes of its step.
constexpr int64_t kGroupStepBytes = 256;

// The weights' layout: group g's step s at packed + g * group_bytes +
// s * step_bytes, `steps` steps a group.
struct Layout {
  const char* packed;
  int64_t group_bytes;
  int64_t step_bytes;
  int64_t steps;
  const char* At(int64_t g, int64_t s) const { return packed + g * group_bytes + s * step_bytes; }
};

// Where a pass prefetches: kVecs / 2 lines a step from `at`, the next
// step's `stride` bytes on (0: none). An address: past the weights it lies
// outside them, which a prefetch may, as it never faults.
struct Ahead {
  uintptr_t at;
  int64_t stride;
};

// The few-row kernels' bf16 layout: groups of contiguous steps, one after
// the other, in chunks of 8 KiB; each pass of a chunk prefetches its share
// of the chunk kPrefetchChunks on (in the next group past the last).
struct Bf16Pairs {
  static constexpr int kInputs = 2;
  static constexpr int64_t kChunkSteps = 32;
  static constexpr int64_t kPrefetchChunks = 2;
  // Part 0 is the even input's weights (shifted into the high half), part
  // 1 the odd one's (the low half cleared), so that each sum takes its
  // products in the order of the inputs, as the fp32 kernels' do. The
  // layout's padding makes every vector of a group readable. (Both parts
  // from one load left GCC a register short.)
  static __m256 Load(const char* w, int part) {
    if (part == 0) {
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)), 16));
    }
    const __m256 high = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0xffff0000u)));
    return _mm256_and_ps(_mm256_loadu_ps(reinterpret_cast<const float*>(w)), high);
  }
  // The pass over columns [c, c + 8 * vecs) of group g's chunk from s0.
  static Ahead Prefetch(const Layout& layout, int64_t g, int64_t s0, int64_t c, int vecs) {
    const int64_t s = s0 + kPrefetchChunks * kChunkSteps;
    const char* chunk = s < layout.steps ? layout.At(g, s) : layout.At(g + 1, s - layout.steps);
    return {reinterpret_cast<uintptr_t>(chunk + kChunkSteps * 4 * c), 32 * vecs};
  }
};

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

// A tile's pass over a chunk of a group's steps.
struct Pass {
  // The tile's columns at the chunk's first step; the next step is
  // step_bytes on.
  const char* weights;
  int64_t step_bytes;
  float* partial;  // kRows x kVecs x 8 floats: the sums so far, between chunks
  bool first;      // the group's first chunk: start from 0, not from partial
  bool last;       // its last: through the epilogue into out, not into partial
  Ahead ahead;     // what it prefetches into L2 as it goes
};

// Rows [0, kRows) of out over kVecs x 8 columns from col0 on (`cols` of
// them exist; the layout's padding makes every vector of a group
// readable): the sums over steps [s0, s1) of the weights (Format) and of x
// (rows ldx apart, Format::kInputs inputs a step), and after the group's
// last chunk the epilogue.
template <class Format, int kRows, int kVecs>
void Tile(const float* x, int64_t ldx, int64_t s0, int64_t s1, const Pass& pass,
          const FewRowsEpilogue& e, int64_t n, int64_t col0, int64_t cols, float* out) {
  static_assert(kRows * kVecs <= 12, "12 accumulators, a part's weights and a broadcast");
  __m256 acc[kRows][kVecs];
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) {
      acc[r][v] =
          pass.first ? _mm256_setzero_ps() : _mm256_load_ps(pass.partial + (r * kVecs + v) * 8);
    }
  }
  for (int64_t s = s0; s < s1; ++s) {
    const char* w = pass.weights + (s - s0) * pass.step_bytes;
    if (pass.ahead.at) {
#pragma GCC unroll 2
      for (int line = 0; line < kVecs / 2; ++line) {
        const uintptr_t at = pass.ahead.at + (s - s0) * pass.ahead.stride + line * 64;
        _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T1);
      }
    }
#pragma GCC unroll 2
    for (int part = 0; part < Format::kInputs; ++part) {
      __m256 wv[kVecs];
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) wv[v] = Format::Load(w + 32 * v, part);
#pragma GCC unroll 12
      for (int r = 0; r < kRows; ++r) {
        const __m256 b = _mm256_broadcast_ss(x + r * ldx + Format::kInputs * s + part);
#pragma GCC unroll 4
        for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm256_fmadd_ps(b, wv[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) {
      if (pass.last) {
        Finish(acc[r][v], e, r, n, col0 + 8 * v, cols - 8 * v, out);
      } else {
        _mm256_store_ps(pass.partial + (r * kVecs + v) * 8, acc[r][v]);
      }
    }
  }
}

using TileFn = void (*)(const float*, int64_t, int64_t, int64_t, const Pass&,
                        const FewRowsEpilogue&, int64_t, int64_t, int64_t, float*);

// The tile for a block of 1 to kBlockRows rows, and the vectors (8
// columns each) it takes of a group's 8. More rows are split into blocks of
// about the same size, which go over the same steps, all but the first from
// L1. (6 rows by 16 columns, 12 accumulators, left too few registers: GCC
// kept some of them in memory.)
constexpr int64_t kBlockRows = 5;
struct BlockTile {
  TileFn fn;
  int vecs;
};
template <class Format>
constexpr BlockTile kTiles[] = {{Tile<Format, 1, 4>, 4},
                                {Tile<Format, 2, 4>, 4},
                                {Tile<Format, 3, 2>, 2},
                                {Tile<Format, 4, 2>, 2},
                                {Tile<Format, 5, 2>, 2}};
static_assert(sizeof(kTiles<Bf16Pairs>) / sizeof(kTiles<Bf16Pairs>[0]) == kBlockRows,
              "a tile for every block");

// The column groups [group_begin, group_end) of out (see FewRowsGemmF32):
// a group at a time, chunk by chunk, every pass of every block of rows over
// each chunk.
template <class Format>
void Gemm(const float* x, int64_t rows, int64_t ldx, const Layout& layout, int64_t n,
          int64_t group_begin, int64_t group_end, const FewRowsEpilogue& epilogue, float* out) {
  if (rows < 1 || rows > kFewRowsMax) return;  // not a call these kernels take
  const int64_t steps = layout.steps;
  // Blocks of `first` rows, the last one possibly smaller.
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const int64_t first = (rows + blocks - 1) / blocks;
  // The group's sums between chunks.
  alignas(32) float partial[kFewRowsMax * kFewRowsGroupColumns];
  const auto chunk = [&](int64_t g, int64_t s0) {
    const int64_t s1 = steps - s0 < Format::kChunkSteps ? steps : s0 + Format::kChunkSteps;
    const int64_t col0 = g * kFewRowsGroupColumns;
    const int64_t cols = n - col0 < kFewRowsGroupColumns ? n - col0 : kFewRowsGroupColumns;
    for (int64_t r0 = 0; r0 < rows; r0 += first) {
      const int64_t block = rows - r0 < first ? rows - r0 : first;
      const BlockTile& tile = kTiles<Format>[block - 1];
      FewRowsEpilogue e = epilogue;
      if (e.residual) e.residual += r0 * n;
      for (int64_t c = 0; c < cols; c += 8 * tile.vecs) {
        // The first block's passes prefetch.
        const Pass pass{layout.At(g, s0) + 4 * c,
                        layout.step_bytes,
                        partial + r0 * kFewRowsGroupColumns + c * block,
                        s0 == 0,
                        s1 == steps,
                        r0 > 0 ? Ahead{0, 0} : Format::Prefetch(layout, g, s0, c, tile.vecs)};
        tile.fn(x + r0 * ldx, ldx, s0, s1, pass, e, n, col0 + c, cols - c, out + r0 * n);
      }
    }
  };
  for (int64_t g = group_begin; g < group_end; ++g)
    for (int64_t s0 = 0; s0 < steps; s0 += Format::kChunkSteps) chunk(g, s0);
}

// fp32 weights [n][k] (torch's layout, oneDNN's `ba`): a column's weights
// are contiguous, so a thread's columns are one stretch of memory. A tile
// takes kColumns columns by up to kColumnRows rows (12 accumulators, the
// rows' inputs and one weight vector of AVX2's 16 registers) over all of
// k, 8 inputs a step; each accumulator lane sums the inputs of its lane in
// their order (FMA chains), and then the lanes are added in one order:
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). Inputs past k (the
// last step's, read through masks) count as 0 x 0.
constexpr int kColumns = 4;
constexpr int64_t kColumnRows = 3;

// What a column tile prefetches into L2: one line at address `at` + 64 * s
// at its step s, for its first `lines` steps (an address: past the last
// column it lies outside the weights, which a prefetch may).
struct Lines {
  uintptr_t at;
  int64_t lines;
};

// The sums of rows [0, kRows) of x (ldx floats apart) with kCols columns
// from w on (k floats each), into sums[r * lds + c].
template <int kRows, int kCols>
void ColumnTile(const float* x, int64_t ldx, const float* w, int64_t k, Lines ahead, float* sums,
                int64_t lds) {
  __m256 acc[kRows][kColumns];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kColumns; ++c) acc[r][c] = _mm256_setzero_ps();
  const auto step = [&](int64_t i, const __m256i* mask) {
    __m256 xv[kRows];
    for (int r = 0; r < kRows; ++r) {
      xv[r] = mask ? _mm256_maskload_ps(x + r * ldx + i, *mask) : _mm256_loadu_ps(x + r * ldx + i);
    }
    for (int c = 0; c < kCols; ++c) {
      const __m256 wv =
          mask ? _mm256_maskload_ps(w + c * k + i, *mask) : _mm256_loadu_ps(w + c * k + i);
      for (int r = 0; r < kRows; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  };
  int64_t i = 0, s = 0;
  for (; i + 8 <= k; i += 8, ++s) {
    if (s < ahead.lines)
      _mm_prefetch(reinterpret_cast<const char*>(ahead.at + 64 * s), _MM_HINT_T1);
    step(i, nullptr);
  }
  if (i < k) {
    const __m256i mask = FirstLanes(k - i);
    step(i, &mask);
  }
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

using ColumnTileFn = void (*)(const float*, int64_t, const float*, int64_t, Lines, float*, int64_t);
template <int kRows>
constexpr ColumnTileFn kColumnTiles[kColumns] = {ColumnTile<kRows, 1>, ColumnTile<kRows, 2>,
                                                 ColumnTile<kRows, 3>, ColumnTile<kRows, 4>};
constexpr const ColumnTileFn* kColumnTilesByRows[kColumnRows] = {kColumnTiles<1>, kColumnTiles<2>,
                                                                 kColumnTiles<3>};

}  // namespace

void FewRowsGemmBf16AsF32Avx2(const float* x, int64_t rows, int64_t ldx, const uint16_t* packed,
                              int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                              const FewRowsEpilogue& epilogue, float* out) {
  const int64_t padded_steps = FewRowsBf16Inputs(k) / 2;
  const Layout layout{reinterpret_cast<const char*>(packed), padded_steps * kGroupStepBytes,
                      kGroupStepBytes, (k + 1) / 2};
  Gemm<Bf16Pairs>(x, rows, ldx, layout, n, group_begin, group_end, epilogue, out);
}

void FewRowsGemmF32Avx2(const float* x, int64_t rows, int64_t ldx, const float* packed, int64_t n,
                        int64_t k, int64_t group_begin, int64_t group_end,
                        const FewRowsEpilogue& epilogue, float* out) {
  if (rows < 1 || rows > kFewRowsF32Avx2MaxRows) return;  // not a call it takes
  const int64_t c0 = group_begin * kFewRowsGroupColumns;
  const int64_t c1 = group_end * kFewRowsGroupColumns < n ? group_end * kFewRowsGroupColumns : n;
  // Blocks of kColumnRows rows, the last one possibly smaller: 3-row tiles
  // run at the fp32 peak, 1- and 2-row ones at three quarters to four
  // fifths of it (one thread, weights in cache, Zen 1), so 4 rows go as
  // 3 + 1, not 2 + 2 (docs/architecture.md, "Few rows").
  const int64_t blocks = (rows + kColumnRows - 1) / kColumnRows;
  const int64_t first = rows < kColumnRows ? rows : kColumnRows;
  // A block of columns (kColumns * k floats, contiguous) is read from memory
  // by the first block of rows and from cache by the others; each block of
  // rows prefetches its share of the next block of columns into L2, so
  // memory streams throughout (past the last column, lines outside the
  // weights: a prefetch never faults).
  const int64_t next_lines = (kColumns * k * static_cast<int64_t>(sizeof(float)) + 63) / 64;
  const int64_t share = (next_lines + blocks - 1) / blocks;
  // The sums of a stretch of columns wait here for the epilogue, which may
  // read the residual from out itself.
  constexpr int64_t kStretch = 128;
  alignas(32) float sums[kFewRowsF32Avx2MaxRows * kStretch];
  for (int64_t s0 = c0; s0 < c1; s0 += kStretch) {
    const int64_t cols = c1 - s0 < kStretch ? c1 - s0 : kStretch;
    for (int64_t col = s0; col < s0 + cols; col += kColumns) {
      const int64_t width = s0 + cols - col < kColumns ? s0 + cols - col : kColumns;
      const float* w = packed + col * k;
      const uintptr_t next =
          reinterpret_cast<uintptr_t>(w) + kColumns * k * static_cast<int64_t>(sizeof(float));
      for (int64_t r0 = 0, b = 0; r0 < rows; r0 += first, ++b) {
        const int64_t block = rows - r0 < first ? rows - r0 : first;
        const int64_t from = b * share < next_lines ? b * share : next_lines;
        const Lines ahead{next + 64 * from, next_lines - from < share ? next_lines - from : share};
        kColumnTilesByRows[block - 1][width - 1](x + r0 * ldx, ldx, w, k, ahead,
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

}  // namespace encoderd::kernels
