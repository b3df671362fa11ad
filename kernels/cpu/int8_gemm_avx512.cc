// Compiled with -mavx512f -mavx512bw -mavx512vnni (kernels/CMakeLists.txt)
// and called only when the CPU has all three. Defines and instantiates no
// inline function with external linkage (no standard-library templates;
// the header's helpers and this file's are in unnamed namespaces), so no
// AVX-512 copy of a shared function can be chosen for generic code.
//
// More than kFewRowsMax rows (Int8GemmVnni): a tile is up to 6 rows by one
// group of 64 columns: 24 accumulators of 16
// int32 lanes, the group's four weight vectors of a step and the row's
// broadcast inputs fill the 32 vector registers. Each step of 4 inputs loads
// the four weight vectors once and uses each for every row of the tile. The
// epilogue then works on the accumulators in registers.
#include "kernels/cpu/int8_gemm_avx512.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/few_rows_tile_avx512.h"

namespace encoderd::kernels {
namespace {

constexpr int kTileRows = 6;
constexpr int64_t kStepBytes = 4 * kInt8GroupColumns;
// Weights are prefetched this far ahead of the step being read while a
// group's first rows stream them from memory (16 steps; measured against 1,
// 2 and 8 KiB on the BERT-base shapes at 10 rows, before 10 rows went to
// the few-row tiles).
constexpr int64_t kPrefetchBytes = 4096;
// The few-row tiles read the same groups and steps.
static_assert(kInt8GroupColumns == kFewRowsGroupColumns && kStepBytes == kFewRowsStepBytes);

// acc += the four u8 x s8 products of each int32 lane (vpdpbusd). Written as
// assembly: with the intrinsic, GCC 12 copies every accumulator through
// the stack at each step, which halves the kernel's speed.
// Acc is __m512i, or __m512 holding int32 lanes (the few-row tiles').
template <class Acc>
inline void DotAccumulate(Acc& acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
}

// The 4 uint8 inputs at p in every int32 lane.
inline __m512i Broadcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// The epilogue of 16 columns of row m (Int8Epilogue), from column col on,
// `mask` the columns that exist.
inline void EpilogueVector(__m512i acc, const Int8Epilogue& e, const Int8RowQuant& row, int64_t m,
                           int64_t n, int64_t col, __mmask16 mask, float* out) {
  // The sum times its column's weight scale, then the row's: the order of
  // the roundings the results have always had.
  __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_loadu_ps(e.weight_scale + col));
  v = _mm512_mul_ps(_mm512_set1_ps(row.scale), v);
  v = _mm512_fnmadd_ps(_mm512_set1_ps(row.scale * row.zero),
                       _mm512_maskz_loadu_ps(mask, e.comp + col), v);
  if (e.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e.bias + col));
  if (e.residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e.residual + m * n + col));
  if (e.gelu) v = GeluErf(v);
  if (e.relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
  _mm512_mask_storeu_ps(out + m * n + col, mask, v);
}

// The epilogue of row m's 64 columns from col0 on, `cols` (>= 1) of which
// exist.
inline void EpilogueRow(__m512i a0, __m512i a1, __m512i a2, __m512i a3, const Int8Epilogue& e,
                        int64_t m, int64_t n, int64_t col0, int64_t cols, float* out) {
  const Int8RowQuant row = e.rows[m];
  EpilogueVector(a0, e, row, m, n, col0, FirstLanes(cols), out);
  if (cols > 16) EpilogueVector(a1, e, row, m, n, col0 + 16, FirstLanes(cols - 16), out);
  if (cols > 32) EpilogueVector(a2, e, row, m, n, col0 + 32, FirstLanes(cols - 32), out);
  if (cols > 48) EpilogueVector(a3, e, row, m, n, col0 + 48, FirstLanes(cols - 48), out);
}

// The accumulators are named variables, not an array: GCC 12 keeps an array
// of them in memory.
#define ENCODERD_TILE_ACCUMULATORS(r) \
  [[maybe_unused]] __m512i a##r##0 = zero, a##r##1 = zero, a##r##2 = zero, a##r##3 = zero
#define ENCODERD_TILE_ROW(r)                    \
  if constexpr (kRows > r) {                    \
    const __m512i b = Broadcast4(xs + r * ldx); \
    DotAccumulate(a##r##0, b, w0);              \
    DotAccumulate(a##r##1, b, w1);              \
    DotAccumulate(a##r##2, b, w2);              \
    DotAccumulate(a##r##3, b, w3);              \
  }
#define ENCODERD_TILE_EPILOGUE(r) \
  if constexpr (kRows > r)        \
  EpilogueRow(a##r##0, a##r##1, a##r##2, a##r##3, e, m0 + r, n, col0, cols, out)

// Rows [m0, m0 + kRows) of out over the group of columns from col0 on
// (`cols` of them exist): the sums over the group's `weights`
// ([steps][64][4]) and the rows of x from row m0 on (ldx bytes apart), then
// the epilogue e.
template <int kRows, bool kPrefetch>
void Tile(const uint8_t* x, int64_t ldx, int64_t steps, const int8_t* weights,
          const Int8Epilogue& e, int64_t m0, int64_t n, int64_t col0, int64_t cols, float* out) {
  // The rows' outputs (and residuals) are read and written after the sums:
  // asked for now, they arrive while the sums are made. A row's 64 floats
  // span 4 or 5 cache lines.
  for (int r = 0; r < kRows; ++r) {
    const int64_t at = (m0 + r) * n + col0;
    for (int64_t j = 0; j <= cols; j += 16) {
      const int64_t c = j < cols ? j : cols - 1;
      _mm_prefetch(reinterpret_cast<const char*>(out + at + c), _MM_HINT_T0);
      if (e.residual && e.residual != out) {
        _mm_prefetch(reinterpret_cast<const char*>(e.residual + at + c), _MM_HINT_T0);
      }
    }
  }
  const __m512i zero = _mm512_setzero_si512();
  ENCODERD_TILE_ACCUMULATORS(0);
  ENCODERD_TILE_ACCUMULATORS(1);
  ENCODERD_TILE_ACCUMULATORS(2);
  ENCODERD_TILE_ACCUMULATORS(3);
  ENCODERD_TILE_ACCUMULATORS(4);
  ENCODERD_TILE_ACCUMULATORS(5);
  for (int64_t s = 0; s < steps; ++s) {
    const int8_t* w = weights + s * kStepBytes;
    if constexpr (kPrefetch) {
      for (int64_t line = 0; line < kStepBytes; line += 64) {
        // An address, not a pointer: past the last group it lies outside
        // the weights, which a prefetch may (it never faults).
        const uintptr_t ahead = reinterpret_cast<uintptr_t>(w) + kPrefetchBytes + line;
        _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
      }
    }
    const __m512i w0 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 64),
                  w2 = _mm512_loadu_si512(w + 128), w3 = _mm512_loadu_si512(w + 192);
    const uint8_t* xs = x + 4 * s;
    ENCODERD_TILE_ROW(0)
    ENCODERD_TILE_ROW(1)
    ENCODERD_TILE_ROW(2)
    ENCODERD_TILE_ROW(3)
    ENCODERD_TILE_ROW(4)
    ENCODERD_TILE_ROW(5)
  }
  ENCODERD_TILE_EPILOGUE(0);
  ENCODERD_TILE_EPILOGUE(1);
  ENCODERD_TILE_EPILOGUE(2);
  ENCODERD_TILE_EPILOGUE(3);
  ENCODERD_TILE_EPILOGUE(4);
  ENCODERD_TILE_EPILOGUE(5);
}

#undef ENCODERD_TILE_ACCUMULATORS
#undef ENCODERD_TILE_ROW
#undef ENCODERD_TILE_EPILOGUE

// The few-row tiles (few_rows_tile_avx512.h) on uint8 x int8: four inputs
// a step, int32 sums held in the __m512 accumulators, the int8 epilogue.
struct Int8Step : FewRowsWholeStep {
  using In = uint8_t;
  using Epilogue = Int8Epilogue;
  static constexpr int64_t kInputs = 4;
  static __m512i Broadcast(const uint8_t* p) { return Broadcast4(p); }
  static void Accumulate(__m512& acc, __m512i u8, __m512i s8) { DotAccumulate(acc, u8, s8); }
  static void Finish(__m512 acc, const Int8Epilogue& e, int64_t m, int64_t n, int64_t col,
                     int64_t left, float* out) {
    if (left <= 0) return;
    EpilogueVector(_mm512_castps_si512(acc), e, e.rows[m], m, n, col, FirstLanes(left), out);
  }
};

template <bool kPrefetch>
void TileRows(int rows, const uint8_t* x, int64_t ldx, int64_t steps, const int8_t* weights,
              const Int8Epilogue& e, int64_t m0, int64_t n, int64_t col0, int64_t cols,
              float* out) {
  switch (rows) {
    case 6:
      return Tile<6, kPrefetch>(x, ldx, steps, weights, e, m0, n, col0, cols, out);
    case 5:
      return Tile<5, kPrefetch>(x, ldx, steps, weights, e, m0, n, col0, cols, out);
    case 4:
      return Tile<4, kPrefetch>(x, ldx, steps, weights, e, m0, n, col0, cols, out);
    case 3:
      return Tile<3, kPrefetch>(x, ldx, steps, weights, e, m0, n, col0, cols, out);
    case 2:
      return Tile<2, kPrefetch>(x, ldx, steps, weights, e, m0, n, col0, cols, out);
    default:
      return Tile<1, kPrefetch>(x, ldx, steps, weights, e, m0, n, col0, cols, out);
  }
}

}  // namespace

void Int8GemmVnni(const uint8_t* x, int64_t row_begin, int64_t row_end, const int8_t* packed,
                  int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                  const Int8Epilogue& epilogue, float* out) {
  const int64_t steps = Int8VnniSteps(k), ldx = Int8VnniRowStride(k);
  for (int64_t g = group_begin; g < group_end; ++g) {
    const int8_t* weights = packed + g * steps * kStepBytes;
    const int64_t col0 = g * kInt8GroupColumns;
    const int64_t cols = n - col0 < kInt8GroupColumns ? n - col0 : kInt8GroupColumns;
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
      const int rows = static_cast<int>(row_end - r0 < kTileRows ? row_end - r0 : kTileRows);
      // The group's first rows read its weights from memory; the others
      // find them in cache.
      if (r0 == row_begin) {
        TileRows<true>(rows, x + r0 * ldx, ldx, steps, weights, epilogue, r0, n, col0, cols, out);
      } else {
        TileRows<false>(rows, x + r0 * ldx, ldx, steps, weights, epilogue, r0, n, col0, cols, out);
      }
    }
  }
}

void Int8GemmVnniFewRows(const uint8_t* x, int64_t rows, int64_t ldx, const int8_t* packed,
                         int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                         const Int8Epilogue& epilogue, float* out) {
  FewRowsGemm<Int8Step>(x, rows, ldx, packed, n, Int8VnniSteps(k), Int8VnniSteps(k), group_begin,
                        group_end, epilogue, out);
}

}  // namespace encoderd::kernels
