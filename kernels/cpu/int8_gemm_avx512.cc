// Compiled with -mavx512f -mavx512bw -mavx512vnni (kernels/CMakeLists.txt)
// and called only when the CPU has all three. Uses no standard-library
// templates, so no AVX-512 instantiation of a shared inline function can leak
// into generic code.
//
// A tile is up to 6 rows by one group of 64 columns: 24 accumulators of 16
// int32 lanes, the group's four weight vectors of a step and the row's
// broadcast inputs fill the 32 vector registers. Each step of 4 inputs loads
// the four weight vectors once and uses each for every row of the tile.
#include "kernels/cpu/int8_gemm_avx512.h"

// GCC 12 reports the _mm512_undefined_* inside its own intrinsic headers as
// uninitialised (GCC bug 105593); the warning says nothing about this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/int8_avx512.h"

namespace encoderd::kernels {
namespace {

constexpr int kTileRows = 6;
constexpr int64_t kStepBytes = 4 * kInt8GroupColumns;
// Weights are prefetched this far ahead of the step being read while a
// group's first rows stream them from memory (16 steps; measured against 1,
// 2 and 8 KiB on the BERT-base shapes at 10 rows).
constexpr int64_t kPrefetchBytes = 4096;

// acc += the four u8 x s8 products of each int32 lane (vpdpbusd). Written as
// assembly: with the intrinsic, GCC 12 copies every accumulator through
// the stack at each step, which halves the kernel's speed.
inline void DotAccumulate(__m512i& acc, __m512i u8, __m512i s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
}

// The 4 uint8 inputs at p in every int32 lane.
inline __m512i Broadcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// 16 sums as fp32 times their columns' weight scales.
inline void StoreScaled(__m512i acc, const float* weight_scale, float* out) {
  _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_loadu_ps(weight_scale)));
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
#define ENCODERD_TILE_STORE(r)                                                  \
  if constexpr (kRows > r) {                                                    \
    StoreScaled(a##r##0, weight_scale, tile + r * kInt8GroupColumns);           \
    StoreScaled(a##r##1, weight_scale + 16, tile + r * kInt8GroupColumns + 16); \
    StoreScaled(a##r##2, weight_scale + 32, tile + r * kInt8GroupColumns + 32); \
    StoreScaled(a##r##3, weight_scale + 48, tile + r * kInt8GroupColumns + 48); \
  }

// tile [kRows, 64] = weight_scale[j] * sum_k x[r, k] w[k, j] over one group
// `weights` ([steps][64][4]); x's rows are ldx bytes apart.
template <int kRows, bool kPrefetch>
void Tile(const uint8_t* x, int64_t ldx, int64_t steps, const int8_t* weights,
          const float* weight_scale, float* tile) {
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
        _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes + line, _MM_HINT_T0);
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
  ENCODERD_TILE_STORE(0)
  ENCODERD_TILE_STORE(1)
  ENCODERD_TILE_STORE(2)
  ENCODERD_TILE_STORE(3)
  ENCODERD_TILE_STORE(4)
  ENCODERD_TILE_STORE(5)
}

#undef ENCODERD_TILE_ACCUMULATORS
#undef ENCODERD_TILE_ROW
#undef ENCODERD_TILE_STORE

template <bool kPrefetch>
void TileRows(int rows, const uint8_t* x, int64_t ldx, int64_t steps, const int8_t* weights,
              const float* weight_scale, float* tile) {
  switch (rows) {
    case 6:
      return Tile<6, kPrefetch>(x, ldx, steps, weights, weight_scale, tile);
    case 5:
      return Tile<5, kPrefetch>(x, ldx, steps, weights, weight_scale, tile);
    case 4:
      return Tile<4, kPrefetch>(x, ldx, steps, weights, weight_scale, tile);
    case 3:
      return Tile<3, kPrefetch>(x, ldx, steps, weights, weight_scale, tile);
    case 2:
      return Tile<2, kPrefetch>(x, ldx, steps, weights, weight_scale, tile);
    default:
      return Tile<1, kPrefetch>(x, ldx, steps, weights, weight_scale, tile);
  }
}

}  // namespace

void PackInt8Vnni(const int8_t* q, int64_t n, int64_t k, int8_t* packed) {
  const int64_t steps = Int8VnniSteps(k);
  for (int64_t g = 0; g < Int8VnniGroups(n); ++g) {
    for (int64_t s = 0; s < steps; ++s) {
      int8_t* out = packed + (g * steps + s) * kStepBytes;
      for (int64_t c = 0; c < kInt8GroupColumns; ++c) {
        const int64_t col = g * kInt8GroupColumns + c;
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t in = 4 * s + i;
          out[4 * c + i] = col < n && in < k ? q[col * k + in] : 0;
        }
      }
    }
  }
}

void Int8GemmVnni(const uint8_t* x, int64_t row_begin, int64_t row_end, const int8_t* packed,
                  int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                  const Int8Epilogue& epilogue, float* out) {
  const int64_t steps = Int8VnniSteps(k), ldx = Int8VnniRowStride(k);
  alignas(64) float tile[kTileRows * kInt8GroupColumns];
  for (int64_t g = group_begin; g < group_end; ++g) {
    const int8_t* weights = packed + g * steps * kStepBytes;
    const int64_t col0 = g * kInt8GroupColumns;
    const int64_t cols = n - col0 < kInt8GroupColumns ? n - col0 : kInt8GroupColumns;
    const float* weight_scale = epilogue.weight_scale + col0;
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
      const int rows = static_cast<int>(row_end - r0 < kTileRows ? row_end - r0 : kTileRows);
      // The group's first rows read its weights from memory; the others
      // find them in cache.
      if (r0 == row_begin) {
        TileRows<true>(rows, x + r0 * ldx, ldx, steps, weights, weight_scale, tile);
      } else {
        TileRows<false>(rows, x + r0 * ldx, ldx, steps, weights, weight_scale, tile);
      }
      for (int r = 0; r < rows; ++r) {
        const int64_t m = r0 + r;
        const Int8RowQuant& p = epilogue.rows[m];
        Int8EpilogueRowAvx512(tile + r * kInt8GroupColumns, cols, p.scale, p.scale * p.zero,
                              epilogue.comp + col0, epilogue.bias ? epilogue.bias + col0 : nullptr,
                              epilogue.residual ? epilogue.residual + m * n + col0 : nullptr,
                              epilogue.gelu, epilogue.relu, out + m * n + col0);
      }
    }
  }
}

}  // namespace encoderd::kernels
