// The tile loop of the few-row kernels (few_rows_gemm_avx512.h), shared by
// few_rows_gemm_f32_avx512.cc, few_rows_gemm_bf16_avx512.cc and the int8
// kernel's few-row path (int8_gemm_avx512.cc), each compiled for its
// instructions. Everything here has internal linkage.
//
// Each weight is used for every row of the call while it is in L1, and the
// prefetches ahead of it keep memory busy for the whole of the computation:
// up to 6 rows are one tile by a group's 64 columns; 7 to 36 rows are 2-6
// tiles of up to 6 rows, which take each chunk of kFewRowsChunkSteps steps
// in turn, the first reading it from memory and the others from L1, each
// prefetching its share of every step ahead. Up to 24 accumulators of 16 fp32
// lanes, a step's 4 weight vectors and a row's broadcast input fill the 32
// vector registers; a tile's sums are carried across chunks in memory.
//
// A Step policy gives: In (the input element), kParts (the parts a step's
// 256 bytes of weights are used in, one after the other) and Load(w, part)
// (part `part` of the 16 columns' weights at w; FewRowsWholeStep: one part,
// the bytes as they are), kInputs (inputs per part), Broadcast(const In*)
// (a part's inputs of a row in every lane), Accumulate(acc, broadcast,
// weights) (acc += the part's products of 16 columns), Epilogue (what turns
// sums into outputs) and Finish(acc, e, m, n, col, left, out) (row m's 16
// columns from col on, `left` of which exist if positive, through the
// epilogue into out). The accumulators are __m512 registers; a policy may
// hold int32 lanes in them (int8_gemm_avx512.cc).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/few_rows_gemm_avx512.h"

namespace encoderd::kernels {
namespace {

// One step is 64 columns' weights of kParts x kInputs inputs: 256 bytes.
constexpr int64_t kFewRowsStepBytes = 256;
// Weights are prefetched this far ahead of the step being read
// (prefetcht1; prefetcht2 and prefetchnta ran the same, so on that CPU each
// hint likely fills L1, where this distance and a tile's 16 KiB chunk fit:
// 32 KiB ahead for the tiles after the first ran 7-21% slower at 8-18
// rows, 2026-11-30). 12 BERT-base layers at 10 rows
// (kernels/bench/gemm_bench, 2-vCPU AMD EPYC, builds with the hint and the
// distance varied, with the half-group passes of before):
// prefetcht0 4 KiB ahead 16.1 ms fp32 / 8.1 ms bf16, prefetcht1 4 KiB
// 15.3 / 7.0, 16 KiB 9.6-9.8 / 5.0-5.1, 32 KiB 10.6 / 5.2, 64 KiB
// 10.0 / 5.3; an added prefetcht0 0.5-2 KiB ahead did not help.
constexpr int64_t kFewRowsPrefetchBytes = 16384;
// 7 to 36 rows take each chunk of this many steps (16 KiB of weights) in
// 2-6 tiles, all but the first reading it from L1 (FewRowsGemm). Before,
// 7-12 rows were one tile of every row by each half of a group (32 columns)
// in turn, each half a pass over the group's steps prefetching its own half
// of every step.
// 12 BERT-base layers streamed (gemm_bench --stream-rows 7, 8, 10, 12; the
// builds alternated 6 times, medians of the paired ratios; 2-vCPU AMD EPYC,
// 2026-11-30) took 16-22% less time in fp32, 9-16% in bf16 and 3-9% in int8
// this way; 4 rows, one tile either way, within 3%. Of the variants tried
// (chunks of 32 or 128 steps, 32 KiB ahead, the first tile prefetching
// whole steps and the second none), each was slower than this in every
// dtype, the last up to 27% slower than the halves (int8, 12 rows).
constexpr int64_t kFewRowsChunkSteps = 64;

// A step used whole: its weights as they lie in memory.
struct FewRowsWholeStep {
  static constexpr int kParts = 1;
  static __m512i Load(const char* w, int /*part*/) { return _mm512_loadu_si512(w); }
};

// The fp32 and bf16 policies' epilogue (FewRowsEpilogue) on fp32 sums.
struct FewRowsFloatEpilogue {
  using Epilogue = FewRowsEpilogue;
  static void Finish(__m512 v, const FewRowsEpilogue& e, int64_t m, int64_t n, int64_t col,
                     int64_t left, float* out) {
    if (left <= 0) return;
    const __mmask16 mask = FirstLanes(left);
    if (e.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e.bias + col));
    if (e.residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e.residual + m * n + col));
    if (e.gelu) v = GeluErf(e.gelu_of_bf16 ? RoundedToBf16(v) : v);
    if (e.relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
    _mm512_mask_storeu_ps(out + m * n + col, mask, v);
  }
};

// Named variables, not an array: GCC 12 keeps an array of accumulators in
// memory. Row r's accumulators a<r>0 .. a<r>3 start from the tile's carried
// sums (row by row, 4 vectors a row) and go back there at the end.
#define ENCODERD_FEW_ROWS_ACCUMULATORS(r)                                   \
  [[maybe_unused]] __m512 a##r##0 = sums[4 * r], a##r##1 = sums[4 * r + 1], \
                          a##r##2 = sums[4 * r + 2], a##r##3 = sums[4 * r + 3];
#define ENCODERD_FEW_ROWS_STEP(r)                    \
  if constexpr (kRows > r) {                         \
    const __m512i b = Step::Broadcast(xs + r * ldx); \
    Step::Accumulate(a##r##0, b, w0);                \
    Step::Accumulate(a##r##1, b, w1);                \
    Step::Accumulate(a##r##2, b, w2);                \
    Step::Accumulate(a##r##3, b, w3);                \
  }
#define ENCODERD_FEW_ROWS_CARRY(r)                                               \
  if constexpr (kRows > r) {                                                     \
    sums[4 * r] = a##r##0, sums[4 * r + 1] = a##r##1, sums[4 * r + 2] = a##r##2, \
             sums[4 * r + 3] = a##r##3;                                          \
  }

// Steps [s0, s1) of one tile: rows [0, kRows) of x (rows ldx inputs apart)
// by a group's 64 columns of the weights at `weights` (one step every
// kFewRowsStepBytes), added to `sums` (kRows x 4 vectors, row by row), which
// carry them from one call to the next (24 vectors, whatever kRows). Each
// step prefetches its lines [kLineBegin, kLineEnd) (of 4)
// kFewRowsPrefetchBytes ahead.
template <class Step, int kRows, int kLineBegin, int kLineEnd>
void FewRowsTileSteps(const typename Step::In* x, int64_t ldx, int64_t s0, int64_t s1,
                      const char* weights, __m512* sums) {
  static_assert(kRows >= 1 && kRows <= 6, "24 accumulators at most");
  ENCODERD_FEW_ROWS_ACCUMULATORS(0)
  ENCODERD_FEW_ROWS_ACCUMULATORS(1)
  ENCODERD_FEW_ROWS_ACCUMULATORS(2)
  ENCODERD_FEW_ROWS_ACCUMULATORS(3)
  ENCODERD_FEW_ROWS_ACCUMULATORS(4)
  ENCODERD_FEW_ROWS_ACCUMULATORS(5)
  for (int64_t s = s0; s < s1; ++s) {
    const char* w = weights + s * kFewRowsStepBytes;
    for (int line = kLineBegin; line < kLineEnd; ++line) {
      // An address, not a pointer: past the last group it lies outside the
      // weights, which a prefetch may (it never faults).
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(w) + kFewRowsPrefetchBytes + 64 * line;
      _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T1);
    }
    // Unrolled, so that each part's Load is its own instructions.
    static_assert(Step::kParts == 1 || Step::kParts == 2, "one or two parts a step");
#pragma GCC unroll 2
    for (int part = 0; part < Step::kParts; ++part) {
      // A later part loads its weights again (from L1): holding a step's
      // loaded weights across parts would take registers the tile has not.
      const __m512i w0 = Step::Load(w, part), w1 = Step::Load(w + 64, part),
                    w2 = Step::Load(w + 128, part), w3 = Step::Load(w + 192, part);
      const typename Step::In* xs = x + (s * Step::kParts + part) * Step::kInputs;
      ENCODERD_FEW_ROWS_STEP(0)
      ENCODERD_FEW_ROWS_STEP(1)
      ENCODERD_FEW_ROWS_STEP(2)
      ENCODERD_FEW_ROWS_STEP(3)
      ENCODERD_FEW_ROWS_STEP(4)
      ENCODERD_FEW_ROWS_STEP(5)
    }
  }
  ENCODERD_FEW_ROWS_CARRY(0)
  ENCODERD_FEW_ROWS_CARRY(1)
  ENCODERD_FEW_ROWS_CARRY(2)
  ENCODERD_FEW_ROWS_CARRY(3)
  ENCODERD_FEW_ROWS_CARRY(4)
  ENCODERD_FEW_ROWS_CARRY(5)
}

#undef ENCODERD_FEW_ROWS_ACCUMULATORS
#undef ENCODERD_FEW_ROWS_STEP
#undef ENCODERD_FEW_ROWS_CARRY

template <class Step>
using FewRowsTileStepsFn = void (*)(const typename Step::In*, int64_t, int64_t, int64_t,
                                    const char*, __m512*);

// The tiles of 1 to 6 rows that prefetch lines [kLineBegin, kLineEnd).
template <class Step, int kLineBegin, int kLineEnd>
constexpr FewRowsTileStepsFn<Step> kFewRowsTilesOf[6] = {
    FewRowsTileSteps<Step, 1, kLineBegin, kLineEnd>,
    FewRowsTileSteps<Step, 2, kLineBegin, kLineEnd>,
    FewRowsTileSteps<Step, 3, kLineBegin, kLineEnd>,
    FewRowsTileSteps<Step, 4, kLineBegin, kLineEnd>,
    FewRowsTileSteps<Step, 5, kLineBegin, kLineEnd>,
    FewRowsTileSteps<Step, 6, kLineBegin, kLineEnd>};

// The tile of `rows` rows that is tile t of `tiles` (1 to 6) over a chunk:
// it prefetches lines [4t / tiles, 4(t + 1) / tiles) of every step (none
// for some of 5 or 6 tiles). The range is fixed at compile time: as loop
// bounds, 12 BERT-base layers streamed at 7 and 10 rows took 3-5% longer.
template <class Step>
FewRowsTileStepsFn<Step> FewRowsTileFor(int64_t rows, int64_t t, int64_t tiles) {
  switch (4 * t / tiles * 4 + 4 * (t + 1) / tiles) {
    case 0 * 4 + 4:
      return kFewRowsTilesOf<Step, 0, 4>[rows - 1];
    case 0 * 4 + 2:
      return kFewRowsTilesOf<Step, 0, 2>[rows - 1];
    case 2 * 4 + 4:
      return kFewRowsTilesOf<Step, 2, 4>[rows - 1];
    case 0 * 4 + 1:
      return kFewRowsTilesOf<Step, 0, 1>[rows - 1];
    case 1 * 4 + 2:
      return kFewRowsTilesOf<Step, 1, 2>[rows - 1];
    case 2 * 4 + 3:
      return kFewRowsTilesOf<Step, 2, 3>[rows - 1];
    case 3 * 4 + 4:
      return kFewRowsTilesOf<Step, 3, 4>[rows - 1];
    default:  // an empty range (5 or 6 tiles): no prefetches
      return kFewRowsTilesOf<Step, 0, 0>[rows - 1];
  }
}

// Rows m0 .. m0 + rows of out over the 64 columns from col0 on (`cols` of
// them exist): a tile's sums through the epilogue e.
template <class Step>
void FewRowsFinish(const __m512* sums, int64_t rows, int64_t m0, const typename Step::Epilogue& e,
                   int64_t n, int64_t col0, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int c = 0; c < 4; ++c) {
      Step::Finish(sums[4 * r + c], e, m0 + r, n, col0 + 16 * c, cols - 16 * c, out);
    }
  }
}

// The few-row GEMM (few_rows_gemm_avx512.h) over `steps` steps of the
// inputs, `padded_steps` in each group of the packed weights.
template <class Step>
void FewRowsGemm(const typename Step::In* x, int64_t rows, int64_t ldx, const void* packed,
                 int64_t n, int64_t steps, int64_t padded_steps, int64_t group_begin,
                 int64_t group_end, const typename Step::Epilogue& e, float* out) {
  if (rows < 1 || rows > kFewRowsMax) return;  // not a call these kernels take
  // Up to 6 rows are one tile over all of a group's steps. More are as few
  // tiles of up to 6 rows as hold them, which take each chunk of
  // kFewRowsChunkSteps steps in turn: the first reads the chunk from memory,
  // the others from L1, and each prefetches its share of every step's 4
  // lines ahead.
  constexpr int64_t kMaxTiles = kFewRowsMax / 6;
  static_assert(kMaxTiles * 6 == kFewRowsMax && kMaxTiles <= 6, "tiles of 6 rows");
  const int64_t tiles = (rows + 5) / 6;
  const int64_t chunk = tiles > 1 ? kFewRowsChunkSteps : steps;
  FewRowsTileStepsFn<Step> tile[kMaxTiles];
  for (int64_t t = 0; t < tiles; ++t) {
    tile[t] = FewRowsTileFor<Step>(rows * (t + 1) / tiles - rows * t / tiles, t, tiles);
  }
  for (int64_t g = group_begin; g < group_end; ++g) {
    const char* weights = static_cast<const char*>(packed) + g * padded_steps * kFewRowsStepBytes;
    const int64_t col0 = g * kFewRowsGroupColumns;
    const int64_t cols = n - col0 < kFewRowsGroupColumns ? n - col0 : kFewRowsGroupColumns;
    __m512 sums[kMaxTiles][24];
    for (int64_t t = 0; t < tiles; ++t) {
      for (__m512& v : sums[t]) v = _mm512_setzero_ps();
    }
    for (int64_t s0 = 0; s0 < steps; s0 += chunk) {
      const int64_t s1 = steps - s0 < chunk ? steps : s0 + chunk;
      for (int64_t t = 0; t < tiles; ++t) {
        tile[t](x + rows * t / tiles * ldx, ldx, s0, s1, weights, sums[t]);
      }
    }
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t r0 = rows * t / tiles, r1 = rows * (t + 1) / tiles;
      FewRowsFinish<Step>(sums[t], r1 - r0, r0, e, n, col0, cols, out);
    }
  }
}

}  // namespace
}  // namespace encoderd::kernels
