// The tile loop of the few-row kernels (few_rows_gemm_avx512.h), shared by
// few_rows_gemm_f32_avx512.cc, few_rows_gemm_bf16_avx512.cc and the int8
// kernel's few-row path (int8_gemm_avx512.cc), each compiled for its
// instructions. Everything here has internal linkage.
//
// Every row of the call is in one tile, so each weight is used for all rows
// as it arrives from memory, and the prefetches ahead of it keep memory busy
// for the whole of the computation: up to 6 rows by a group's 64 columns, or
// 7 to 12 rows by half a group (32 columns), the two halves one after the
// other. Up to 24 accumulators of 16 fp32 lanes, a step's weight vectors and
// a row's broadcast input fill the 32 vector registers.
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
// Weights are prefetched this far ahead of the step being read, into L2
// (prefetcht1): a prefetch into L1 holds one of L1's few miss buffers until
// its line arrives, which capped the stream at ~21 GB/s. 12 BERT-base
// layers at 10 rows (kernels/bench/gemm_bench, 2-vCPU AMD EPYC, builds with
// the hint and the distance varied):
// prefetcht0 4 KiB ahead 16.1 ms fp32 / 8.1 ms bf16, prefetcht1 4 KiB
// 15.3 / 7.0, 16 KiB 9.6-9.8 / 5.0-5.1, 32 KiB 10.6 / 5.2, 64 KiB
// 10.0 / 5.3; an added prefetcht0 0.5-2 KiB ahead did not help.
constexpr int64_t kFewRowsPrefetchBytes = 16384;

// The columns of a 16-lane block that exist when `left` columns are left.
inline __mmask16 FewRowsColumns(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

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
    const __mmask16 mask = FewRowsColumns(left);
    if (e.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e.bias + col));
    if (e.residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e.residual + m * n + col));
    if (e.gelu) v = GeluErf(v);
    if (e.relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
    _mm512_mask_storeu_ps(out + m * n + col, mask, v);
  }
};

// Named variables, not an array: GCC 12 keeps an array of accumulators in
// memory. Row r's accumulators are a<r>0 .. a<r>3, of which kVecs are used.
#define ENCODERD_FEW_ROWS_ACCUMULATORS(r) \
  [[maybe_unused]] __m512 a##r##0 = zero, a##r##1 = zero, a##r##2 = zero, a##r##3 = zero;
#define ENCODERD_FEW_ROWS_STEP(r)                              \
  if constexpr (kRows > r) {                                   \
    const __m512i b = Step::Broadcast(xs + r * ldx);           \
    Step::Accumulate(a##r##0, b, w0);                          \
    if constexpr (kVecs > 1) Step::Accumulate(a##r##1, b, w1); \
    if constexpr (kVecs > 2) Step::Accumulate(a##r##2, b, w2); \
    if constexpr (kVecs > 3) Step::Accumulate(a##r##3, b, w3); \
  }
#define ENCODERD_FEW_ROWS_FINISH(r)                                                     \
  if constexpr (kRows > r) {                                                            \
    Step::Finish(a##r##0, e, r, n, col0, cols, out);                                    \
    if constexpr (kVecs > 1) Step::Finish(a##r##1, e, r, n, col0 + 16, cols - 16, out); \
    if constexpr (kVecs > 2) Step::Finish(a##r##2, e, r, n, col0 + 32, cols - 32, out); \
    if constexpr (kVecs > 3) Step::Finish(a##r##3, e, r, n, col0 + 48, cols - 48, out); \
  }

// Rows [0, kRows) of out over kVecs x 16 columns from col0 on (`cols` of
// them exist, at most 16 * kVecs): the sums over `steps` steps of x (rows
// ldx inputs apart) and of the weights at `weights` (one step every
// kFewRowsStepBytes, the tile's columns at the start of each), then the
// epilogue e.
template <class Step, int kRows, int kVecs>
void FewRowsTile(const typename Step::In* x, int64_t ldx, int64_t steps, const char* weights,
                 const typename Step::Epilogue& e, int64_t n, int64_t col0, int64_t cols,
                 float* out) {
  static_assert(kRows * kVecs <= 24, "24 accumulators at most");
  const __m512 zero = _mm512_setzero_ps();
  ENCODERD_FEW_ROWS_ACCUMULATORS(0)
  ENCODERD_FEW_ROWS_ACCUMULATORS(1)
  ENCODERD_FEW_ROWS_ACCUMULATORS(2)
  ENCODERD_FEW_ROWS_ACCUMULATORS(3)
  ENCODERD_FEW_ROWS_ACCUMULATORS(4)
  ENCODERD_FEW_ROWS_ACCUMULATORS(5)
  ENCODERD_FEW_ROWS_ACCUMULATORS(6)
  ENCODERD_FEW_ROWS_ACCUMULATORS(7)
  ENCODERD_FEW_ROWS_ACCUMULATORS(8)
  ENCODERD_FEW_ROWS_ACCUMULATORS(9)
  ENCODERD_FEW_ROWS_ACCUMULATORS(10)
  ENCODERD_FEW_ROWS_ACCUMULATORS(11)
  for (int64_t s = 0; s < steps; ++s) {
    const char* w = weights + s * kFewRowsStepBytes;
    for (int line = 0; line < kVecs; ++line) {
      // An address, not a pointer: past the last group it lies outside
      // the weights, which a prefetch may (it never faults).
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(w) + kFewRowsPrefetchBytes + 64 * line;
      _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T1);
    }
    // Unrolled, so that each part's Load is its own instructions.
    static_assert(Step::kParts == 1 || Step::kParts == 2, "one or two parts a step");
#pragma GCC unroll 2
    for (int part = 0; part < Step::kParts; ++part) {
      // A later part loads its weights again (from L1): holding a step's
      // loaded weights across parts would take registers the tile has not.
      const __m512i w0 = Step::Load(w, part);
      [[maybe_unused]] __m512i w1, w2, w3;
      if constexpr (kVecs > 1) w1 = Step::Load(w + 64, part);
      if constexpr (kVecs > 2) w2 = Step::Load(w + 128, part);
      if constexpr (kVecs > 3) w3 = Step::Load(w + 192, part);
      const typename Step::In* xs = x + (s * Step::kParts + part) * Step::kInputs;
      ENCODERD_FEW_ROWS_STEP(0)
      ENCODERD_FEW_ROWS_STEP(1)
      ENCODERD_FEW_ROWS_STEP(2)
      ENCODERD_FEW_ROWS_STEP(3)
      ENCODERD_FEW_ROWS_STEP(4)
      ENCODERD_FEW_ROWS_STEP(5)
      ENCODERD_FEW_ROWS_STEP(6)
      ENCODERD_FEW_ROWS_STEP(7)
      ENCODERD_FEW_ROWS_STEP(8)
      ENCODERD_FEW_ROWS_STEP(9)
      ENCODERD_FEW_ROWS_STEP(10)
      ENCODERD_FEW_ROWS_STEP(11)
    }
  }
  ENCODERD_FEW_ROWS_FINISH(0)
  ENCODERD_FEW_ROWS_FINISH(1)
  ENCODERD_FEW_ROWS_FINISH(2)
  ENCODERD_FEW_ROWS_FINISH(3)
  ENCODERD_FEW_ROWS_FINISH(4)
  ENCODERD_FEW_ROWS_FINISH(5)
  ENCODERD_FEW_ROWS_FINISH(6)
  ENCODERD_FEW_ROWS_FINISH(7)
  ENCODERD_FEW_ROWS_FINISH(8)
  ENCODERD_FEW_ROWS_FINISH(9)
  ENCODERD_FEW_ROWS_FINISH(10)
  ENCODERD_FEW_ROWS_FINISH(11)
}

#undef ENCODERD_FEW_ROWS_ACCUMULATORS
#undef ENCODERD_FEW_ROWS_STEP
#undef ENCODERD_FEW_ROWS_FINISH

template <class Step>
using FewRowsTileFn = void (*)(const typename Step::In*, int64_t, int64_t, const char*,
                               const typename Step::Epilogue&, int64_t, int64_t, int64_t, float*);

// The tile for 1 to kFewRowsMax rows: up to 6 rows by a whole group (4
// vectors), 7 to 12 by half of one (2).
template <class Step>
constexpr FewRowsTileFn<Step> kFewRowsTiles[] = {
    FewRowsTile<Step, 1, 4>,  FewRowsTile<Step, 2, 4>,  FewRowsTile<Step, 3, 4>,
    FewRowsTile<Step, 4, 4>,  FewRowsTile<Step, 5, 4>,  FewRowsTile<Step, 6, 4>,
    FewRowsTile<Step, 7, 2>,  FewRowsTile<Step, 8, 2>,  FewRowsTile<Step, 9, 2>,
    FewRowsTile<Step, 10, 2>, FewRowsTile<Step, 11, 2>, FewRowsTile<Step, 12, 2>};

// The few-row GEMM (few_rows_gemm_avx512.h) over `steps` steps of the
// inputs, `padded_steps` in each group of the packed weights.
template <class Step>
void FewRowsGemm(const typename Step::In* x, int64_t rows, int64_t ldx, const void* packed,
                 int64_t n, int64_t steps, int64_t padded_steps, int64_t group_begin,
                 int64_t group_end, const typename Step::Epilogue& e, float* out) {
  static_assert(sizeof(kFewRowsTiles<Step>) / sizeof(kFewRowsTiles<Step>[0]) == kFewRowsMax,
                "a tile for every row count");
  if (rows < 1 || rows > kFewRowsMax) return;  // not a call these kernels take
  const FewRowsTileFn<Step> tile = kFewRowsTiles<Step>[rows - 1];
  // A tile takes a whole group up to 6 rows, else each half of it in turn.
  // Every layout holds 4 bytes a column in each step, so a tile's columns
  // from c on start 4 * c bytes into the step.
  const int64_t tile_cols = rows <= 6 ? kFewRowsGroupColumns : kFewRowsGroupColumns / 2;
  for (int64_t g = group_begin; g < group_end; ++g) {
    const char* weights = static_cast<const char*>(packed) + g * padded_steps * kFewRowsStepBytes;
    const int64_t col0 = g * kFewRowsGroupColumns;
    const int64_t cols = n - col0 < kFewRowsGroupColumns ? n - col0 : kFewRowsGroupColumns;
    for (int64_t c = 0; c < cols; c += tile_cols) {
      tile(x, ldx, steps, weights + 4 * c, e, n, col0 + c, cols - c, out);
    }
  }
}

}  // namespace
}  // namespace encoderd::kernels
