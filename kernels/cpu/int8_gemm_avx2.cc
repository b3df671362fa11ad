// Compiled with -mavx2 -mfma (kernels/CMakeLists.txt) and called only when
// the CPU has both. Defines no inline function with external linkage, so no
// AVX2 copy of a shared function can be chosen for generic code.
//
// The int8 Linear's GEMM where the CPU has AVX2 but not AVX512-VNNI, on the
// VNNI kernel's weight layout (int8_gemm_avx512.h). AVX2's byte multiply
// (vpmaddubsw) adds two uint8 x int8 products into a saturating int16, which
// 255 x 127 x 2 overflows; vpmaddwd multiplies 16-bit values into exact
// int32 pairs. So the inputs come widened and paired (Int8Pairs), each
// weight vector is split into its even and odd bytes sign-extended to 16
// bits (three shifts, shared by every row of the tile), and a step of 4
// inputs takes two vpmaddwd and two vpaddd per 8 columns and row: the int32
// sums VNNI's vpdpbusd makes, exactly, then the same epilogue.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/int8_gemm_avx512.h"

namespace encoderd::kernels {
namespace {

// A step's 64 columns of 4 weights; a vector is 8 of its columns.
constexpr int64_t kStepBytes = 4 * kInt8GroupColumns;
// Rows of a tile, by 16 columns (2 vectors): 8 accumulators, 4 split weight
// vectors and 2 broadcast input pairs of AVX2's 16 registers.
constexpr int64_t kTileRows = 4;
constexpr int kVecs = 2;

// The epilogue of 8 columns of row m (Int8Epilogue) from col on, `left` of
// which exist (all from 8 on): the VNNI kernel's operations, in its order.
inline void Finish(__m256i acc, const Int8Epilogue& e, int64_t m, int64_t n, int64_t col,
                   int64_t left, float* out) {
  if (left <= 0) return;
  const Int8RowQuant& row = e.rows[m];
  // weight_scale covers every packed column (zero past n).
  __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), _mm256_loadu_ps(e.weight_scale + col));
  v = _mm256_mul_ps(_mm256_set1_ps(row.scale), v);
  v = _mm256_fnmadd_ps(_mm256_set1_ps(row.scale * row.zero), LoadFirst(e.comp + col, left), v);
  if (e.bias) v = _mm256_add_ps(v, LoadFirst(e.bias + col, left));
  if (e.residual) v = _mm256_add_ps(v, LoadFirst(e.residual + m * n + col, left));
  if (e.gelu) v = GeluErf(v);
  if (e.relu) v = _mm256_max_ps(v, _mm256_setzero_ps());
  StoreFirst(out + m * n + col, left, v);
}

inline __m256i BroadcastWord(const uint32_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// What a tile prefetches into L2 as it goes: the line at address `at` + s *
// kStepBytes at its step s, for its first `steps` steps. An address, not a
// pointer: past the last group it lies outside the weights, which a
// prefetch may, as it never faults.
struct Ahead {
  uintptr_t at;
  int64_t steps;
};

// Rows [m0, m0 + kRows) of out over 16 columns from col0 on (`cols` of them
// exist, at least 1): the sums over every step of the group whose weights
// start at `weights` (already offset to the tile's columns), then the
// epilogue. x: the rows' input pairs (Int8GemmAvx2), ldx words apart, from
// m0.
template <int kRows>
void Tile(const uint32_t* x, int64_t ldx, int64_t steps, const int8_t* weights, Ahead ahead,
          const Int8Epilogue& e, int64_t m0, int64_t n, int64_t col0, int64_t cols, float* out) {
  __m256i acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm256_setzero_si256();
  for (int64_t s = 0; s < steps; ++s) {
    const int8_t* w = weights + s * kStepBytes;
    if (s < ahead.steps)
      _mm_prefetch(reinterpret_cast<const char*>(ahead.at + s * kStepBytes), _MM_HINT_T1);
    // Each 32-bit lane holds one column's 4 weights w0..w3: the even ones
    // (w0, w2) and the odd ones (w1, w3) as 16-bit pairs.
    __m256i even[kVecs], odd[kVecs];
    for (int v = 0; v < kVecs; ++v) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * v));
      even[v] = _mm256_srai_epi16(_mm256_slli_epi16(raw, 8), 8);
      odd[v] = _mm256_srai_epi16(raw, 8);
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256i xe = BroadcastWord(x + r * ldx + 2 * s);
      const __m256i xo = BroadcastWord(x + r * ldx + 2 * s + 1);
      for (int v = 0; v < kVecs; ++v) {
        acc[r][v] = _mm256_add_epi32(acc[r][v], _mm256_madd_epi16(even[v], xe));
        acc[r][v] = _mm256_add_epi32(acc[r][v], _mm256_madd_epi16(odd[v], xo));
      }
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v)
      Finish(acc[r][v], e, m0 + r, n, col0 + 8 * v, cols - 8 * v, out);
}

using TileFn = void (*)(const uint32_t*, int64_t, int64_t, const int8_t*, Ahead,
                        const Int8Epilogue&, int64_t, int64_t, int64_t, int64_t, float*);
constexpr TileFn kTiles[kTileRows] = {Tile<1>, Tile<2>, Tile<3>, Tile<4>};

}  // namespace

void Int8GemmAvx2(const uint32_t* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                  const int8_t* packed, int64_t n, int64_t k, int64_t group_begin,
                  int64_t group_end, const Int8Epilogue& epilogue, float* out) {
  const int64_t rows = row_end - row_begin;
  if (rows < 1) return;
  const int64_t steps = Int8VnniSteps(k);
  // Blocks of `first` rows, the last one possibly smaller.
  const int64_t blocks = (rows + kTileRows - 1) / kTileRows;
  const int64_t first = (rows + blocks - 1) / blocks;
  for (int64_t g = group_begin; g < group_end; ++g) {
    const int8_t* weights = packed + g * steps * kStepBytes;
    const int64_t col0 = g * kInt8GroupColumns;
    const int64_t cols = n - col0 < kInt8GroupColumns ? n - col0 : kInt8GroupColumns;
    // The group (64 x k bytes: 192 KiB for k = 3072) is read from L2:
    // each block's passes prefetch their share of the next group's steps
    // (past the last group, lines outside the weights: a prefetch never
    // faults), so memory streams while the group is computed.
    const uintptr_t next = reinterpret_cast<uintptr_t>(weights) + steps * kStepBytes;
    const int64_t share = (steps + blocks - 1) / blocks;
    for (int64_t r0 = row_begin, b = 0; r0 < row_end; r0 += first, ++b) {
      const int64_t block = row_end - r0 < first ? row_end - r0 : first;
      const int64_t s0 = b * share < steps ? b * share : steps;
      const int64_t count = steps - s0 < share ? steps - s0 : share;
      for (int64_t c = 0; c < cols; c += 8 * kVecs) {
        const Ahead ahead{next + s0 * kStepBytes + 4 * c, count};
        kTiles[block - 1](x + r0 * ldx, ldx, steps, weights + 4 * c, ahead, epilogue, r0, n,
                          col0 + c, cols - c, out);
      }
    }
  }
}

}  // namespace encoderd::kernels
