// Compiled with -mavx2 -mfma (kernels/CMakeLists.txt) and called only when
// the CPU has both. Defines no inline function with external linkage, so no
// AVX2 copy of a shared function can be chosen for generic code.
//
// FewRowsGemmBf16AsF32Avx2 (few_rows_gemm_avx512.h): the bf16 weights of a
// CPU without AVX-512, in the few-row kernels' bf16 layout, widened to fp32
// in registers. 16 registers of 8 lanes hold fewer accumulators than
// AVX-512's 32 of 16, so the rows go in blocks of up to kBlockRows (1-2
// rows by 32 columns, 3-5 by 16) and a group's 64 columns take several
// passes (kTiles). The passes go over kChunkSteps steps (8 KiB) of the
// group at a time: the first block's first pass finds them in L2, where
// every pass of the chunks before prefetched its share, and the other
// passes and blocks read them from L1, so each weight comes from memory
// once.
#include <immintrin.h>

#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/few_rows_gemm_avx512.h"

namespace encoderd::kernels {
namespace {

constexpr int64_t kStepBytes = 256;  // a pair of inputs of 64 columns, in bf16

// Row m's 8 columns from col on, `left` of which exist if positive, through
// the epilogue (few_rows_gemm_avx512.h: bias, residual, then GELU or ReLU).
inline void Finish(__m256 v, const FewRowsEpilogue& e, int64_t m, int64_t n, int64_t col,
                   int64_t left, float* out) {
  if (left <= 0) return;
  const __m256i mask = FirstLanes(left);
  if (e.bias) v = _mm256_add_ps(v, _mm256_maskload_ps(e.bias + col, mask));
  if (e.residual) v = _mm256_add_ps(v, _mm256_maskload_ps(e.residual + m * n + col, mask));
  if (e.gelu) v = GeluErf(v);
  if (e.relu) v = _mm256_max_ps(v, _mm256_setzero_ps());
  _mm256_maskstore_ps(out + m * n + col, mask, v);
}

// Where a tile's sums stand between the chunks of a group's steps.
struct Sums {
  float* partial;  // kRows x kVecs x 8 floats: the sums so far, between chunks
  bool first;      // the group's first chunk: start from 0, not from partial
  bool last;       // its last: through the epilogue into out, not into partial
  // This pass's share of the weights kPrefetchChunks chunks ahead, or 0
  // for none (an address: past the last group it lies outside the weights,
  // which a prefetch may, as it never faults): kVecs / 2 lines a step, so
  // that the passes of a chunk spread its prefetches over its time.
  uintptr_t ahead;
};

// Rows [0, kRows) of out over kVecs x 8 columns from col0 on (`cols` of
// them exist): the sums over steps [s0, s1) of the weights at `weights` (a
// step every kStepBytes, the tile's columns at the start of each: 8
// columns' pairs a vector) and of x (rows ldx apart, two inputs a step),
// and after the group's last chunk the epilogue. Each step is used in two
// parts, the even input's weights (shifted into the high half) and then the
// odd one's (the low half cleared), so each sum takes its products in the
// order of the inputs, as the fp32 few-row kernel's do.
template <int kRows, int kVecs>
void Tile(const float* x, int64_t ldx, int64_t s0, int64_t s1, const char* weights,
          const Sums& sums, const FewRowsEpilogue& e, int64_t n, int64_t col0, int64_t cols,
          float* out) {
  static_assert(kRows * kVecs <= 12, "12 accumulators, a part's weights and a broadcast");
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  __m256 acc[kRows][kVecs];
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) {
      acc[r][v] =
          sums.first ? _mm256_setzero_ps() : _mm256_load_ps(sums.partial + (r * kVecs + v) * 8);
    }
  }
  for (int64_t s = s0; s < s1; ++s) {
    const char* w = weights + s * kStepBytes;
    if (sums.ahead) {
#pragma GCC unroll 2
      for (int line = 0; line < kVecs / 2; ++line) {
        const uintptr_t at = sums.ahead + ((s - s0) * (kVecs / 2) + line) * 64;
        _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T1);
      }
    }
#pragma GCC unroll 2
    for (int part = 0; part < 2; ++part) {
      __m256 wv[kVecs];
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) {
        const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * v));
        wv[v] = _mm256_castsi256_ps(part == 0 ? _mm256_slli_epi32(pairs, 16)
                                              : _mm256_and_si256(pairs, high));
      }
#pragma GCC unroll 12
      for (int r = 0; r < kRows; ++r) {
        const __m256 b = _mm256_broadcast_ss(x + r * ldx + 2 * s + part);
#pragma GCC unroll 4
        for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm256_fmadd_ps(b, wv[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) {
      if (sums.last) {
        Finish(acc[r][v], e, r, n, col0 + 8 * v, cols - 8 * v, out);
      } else {
        _mm256_store_ps(sums.partial + (r * kVecs + v) * 8, acc[r][v]);
      }
    }
  }
}

using TileFn = void (*)(const float*, int64_t, int64_t, int64_t, const char*, const Sums&,
                        const FewRowsEpilogue&, int64_t, int64_t, int64_t, float*);

// The tile for a block of 1 to kBlockRows rows, and the vectors (8
// columns each) it takes of a group's 8. More rows are split into blocks of
// about the same size, which go over the same steps, all but the first from
// L1. (6 rows by 16 columns, 12 accumulators, left too few registers: GCC
// kept some of them in memory.)
constexpr int64_t kBlockRows = 5;
constexpr struct {
  TileFn fn;
  int vecs;
} kTiles[] = {{Tile<1, 4>, 4}, {Tile<2, 4>, 4}, {Tile<3, 2>, 2}, {Tile<4, 2>, 2}, {Tile<5, 2>, 2}};
static_assert(sizeof(kTiles) / sizeof(kTiles[0]) == kBlockRows, "a tile for every block");

// Steps of a group that every pass of its tiles goes over before the next
// ones: 8 KiB of weights, from L2 (prefetched) into L1 by the first pass,
// from L1 for the others.
constexpr int64_t kChunkSteps = 32;
constexpr int64_t kPrefetchChunks = 2;

}  // namespace

void FewRowsGemmBf16AsF32Avx2(const float* x, int64_t rows, int64_t ldx, const uint16_t* packed,
                              int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                              const FewRowsEpilogue& epilogue, float* out) {
  if (rows < 1 || rows > kFewRowsMax) return;  // not a call these kernels take
  const int64_t steps = (k + 1) / 2, padded_steps = FewRowsBf16Inputs(k) / 2;
  // Blocks of `first` rows, the last one possibly smaller.
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const int64_t first = (rows + blocks - 1) / blocks;
  alignas(32) float partial[kFewRowsMax * kFewRowsGroupColumns];
  for (int64_t g = group_begin; g < group_end; ++g) {
    const char* weights = reinterpret_cast<const char*>(packed) + g * padded_steps * kStepBytes;
    const int64_t col0 = g * kFewRowsGroupColumns;
    const int64_t cols = n - col0 < kFewRowsGroupColumns ? n - col0 : kFewRowsGroupColumns;
    for (int64_t s0 = 0; s0 < steps; s0 += kChunkSteps) {
      const int64_t s1 = steps - s0 < kChunkSteps ? steps : s0 + kChunkSteps;
      for (int64_t r0 = 0; r0 < rows; r0 += first) {
        const int64_t block = rows - r0 < first ? rows - r0 : first;
        const auto tile = kTiles[block - 1];
        FewRowsEpilogue e = epilogue;
        if (e.residual) e.residual += r0 * n;
        // A column's pair of bf16 values is 4 bytes of the step.
        for (int64_t c = 0; c < cols; c += 8 * tile.vecs) {
          // The first block's passes prefetch, each its share.
          const uintptr_t ahead = r0 > 0 ? 0
                                         : reinterpret_cast<uintptr_t>(weights) +
                                               (s0 + kPrefetchChunks * kChunkSteps) * kStepBytes +
                                               kChunkSteps * 4 * c;
          const Sums sums{partial + r0 * kFewRowsGroupColumns + c * block, s0 == 0, s1 == steps,
                          ahead};
          tile.fn(x + r0 * ldx, ldx, s0, s1, weights + 4 * c, sums, e, n, col0 + c, cols - c,
                  out + r0 * n);
        }
      }
    }
  }
}

}  // namespace encoderd::kernels
