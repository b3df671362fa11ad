// The fp32 and bf16 Linear at a few rows (kernels/cpu/linear_cpu.cc), on
// the weights oneDNN packed for its AVX-512 brgemm (the int8 kernel runs the
// same tiles, int8_gemm_avx512.h). At a few rows a GEMM streams its weights
// from memory, and oneDNN's brgemm lets memory sit idle part of the time;
// these kernels keep it busy (docs/architecture.md, "Few rows", has the
// figures).
//
// Weight layouts (oneDNN's, checked against the weight's memory descriptor
// before these are used; FewRowsLayout in linear_cpu.cc):
// - fp32, BA16a64b: output columns in groups of 64; a group holds, for each
//   input i (k rounded up to 16: FewRowsF32Inputs), the 64 columns' weights,
//   [k16][64] floats; groups follow each other.
// - bf16, BA16a64b2a: the same with the inputs in pairs, [k32 / 2][64][2]
//   bf16 values, k rounded up to 32 (FewRowsBf16Inputs).
// The padding (columns past n, inputs past k) is zero. The bf16 weights of
// a CPU with AVX-512 but not AVX512-BF16 are packed in the same bf16
// layout by PackFewRowsBf16 (linear_cpu.cc), widened there for oneDNN's
// fp32 GEMMs.
// - fp32 on AVX2 (oneDNN's GEMM there takes plain layouts): ba, [n][k]
//   floats (torch's own layout), no padding, which linear_cpu.cc asks
//   oneDNN for where FewRowsGemmF32Avx2 reads the weight.
// - bf16 on AVX2 without AVX-512 (PackBf16Columns, linear_cpu.cc): [n][k16]
//   bf16 values, k rounded up to 16 (FewRowsBf16ColumnsInputs) with zeros,
//   each 16 inputs stored as inputs 0-3, 8-11, 4-7, 12-15 (AVX2's in-lane
//   unpacks widen them in order: few_rows_gemm_avx2.cc).
//
// Call the fp32 kernels (FewRowsGemmF32, FewRowsGemmBf16AsF32) only when the
// CPU has AVX-512 F, the bf16 one when it also has BW and BF16, and
// FewRowsGemmBf16ColumnsAvx2 and FewRowsGemmF32Avx2 (on the [n][k]
// layouts above) when it has AVX2 and FMA.
#pragma once

#include <cstdint>

namespace encoderd::kernels {

constexpr int64_t kFewRowsGroupColumns = 64;
// The most rows the kernels take in one call: up to 6 tiles of up to 6 rows
// by 64 columns (24 accumulators each) over each chunk of a group's steps
// (few_rows_tile_avx512.h).
constexpr int64_t kFewRowsMax = 36;
// The most rows a bf16 weight widened in registers on AVX-512
// (FewRowsGemmBf16AsF32) takes, in blocks of up to kFewRowsMax rows
// (linear_cpu.cc, LinearFewRows); more widen it for oneDNN's fp32 GEMMs.
// On the BERT-base shapes (2 threads, an Ice Lake Xeon VM) the blocks took
// 0.44-0.65x oneDNN's time at 40 rows, 0.91-0.96x at 256, 0.94-1.01x at
// 384 and 0.95-1.08x at 512 (docs/architecture.md, "bf16 weights without
// bf16 instructions").
constexpr int64_t kFewRowsBf16AsF32MaxRows = 384;
// The smallest fp32 weight FewRowsGemmF32Avx2 takes: a weight this large
// belongs to a model that does not stay in cache (BERT-base's are 2.4-9.4
// MB, 340 MB in all), and smaller ones stay on oneDNN and its own layout
// (the default model's are 0.25-1 MB, 9 MB in all). Set for the kernel's
// first version, which was slower than oneDNN with the weights in cache
// (docs/architecture.md, "Few rows").
constexpr int64_t kFewRowsF32Avx2MinBytes = int64_t{2} << 20;
// The most rows FewRowsGemmF32Avx2 takes: up to this many, oneDNN's AVX2
// GEMM on the same weights is slower.
constexpr int64_t kFewRowsF32Avx2MaxRows = 32;
// The most rows FewRowsGemmBf16ColumnsAvx2 takes, in blocks of up to
// kFewRowsMax rows (linear_cpu.cc, LinearFewRows): on the BERT-base shapes
// the kernel before it took 0.48-0.76x the time of oneDNN on the widened
// weight at 40 rows and 0.82-0.97x at 128, mixed at 192 (2 threads, an Ice
// Lake Xeon VM with AVX-512 turned off: ENCODERD_CPU_DISABLE=avx512f); on
// a Zen 1 EPYC, 12 BERT-base layers streamed take about the same time a
// row at 128 rows on this kernel as at 129 widened for oneDNN
// (docs/architecture.md, "Few rows").
constexpr int64_t kFewRowsBf16AsF32Avx2MaxRows = 128;

// Internal linkage: this header is also compiled with AVX-512 flags, and no
// AVX-512 copy of a shared inline function may be chosen for generic code.
namespace {

inline int64_t FewRowsGroups(int64_t n) {
  return (n + kFewRowsGroupColumns - 1) / kFewRowsGroupColumns;
}
inline int64_t FewRowsF32Inputs(int64_t k) { return (k + 15) / 16 * 16; }
inline int64_t FewRowsBf16Inputs(int64_t k) { return (k + 31) / 32 * 32; }
inline int64_t FewRowsBf16ColumnsInputs(int64_t k) { return (k + 15) / 16 * 16; }
// Bytes of an [n, k] weight in the AVX2 bf16 layout below.
inline int64_t FewRowsBf16ColumnsBytes(int64_t n, int64_t k) {
  return n * FewRowsBf16ColumnsInputs(k) * 2;
}
// Bytes of an [n, k] weight in the bf16 layout (a multiple of 256).
inline int64_t FewRowsBf16PackedBytes(int64_t n, int64_t k) {
  return FewRowsGroups(n) * kFewRowsGroupColumns * FewRowsBf16Inputs(k) * 2;
}
// A row stride for k inputs of `bytes` bytes: whole cache lines, and one
// more line where that is a multiple of 4 KiB.
inline int64_t FewRowsStride(int64_t k, int64_t bytes) {
  const int64_t per_line = 64 / bytes, lines = (k + per_line - 1) / per_line;
  return (lines % 64 == 0 ? lines + 1 : lines) * per_line;
}

}  // namespace

// out[m, j] = act(sum + bias[j] + residual[m, j]) in fp32, in this order;
// act GELU (erf form, within 1e-6 of it), max(x, 0) or none; with
// gelu_of_bf16, GELU of its input rounded to bf16 (nearest even), as bf16
// GEMMs apply it (linear_cpu.cc, GemmChunks). bias and residual may be
// null; residual and out are [rows, n] and may alias.
struct FewRowsEpilogue {
  const float* bias;
  const float* residual;
  bool gelu;
  bool relu;
  bool gelu_of_bf16 = false;
};

// out [rows, n] (rows <= kFewRowsMax) for the column groups
// [group_begin, group_end): one thread's share of the Linear. x is `rows`
// rows of k inputs, ldx elements apart: fp32, or bf16 (k even) for the bf16
// kernel; `packed` the whole weight in the layout above. Each weight is
// read from memory once. Rows a multiple of 4 KiB apart share L1 sets with
// each other and with the weights streaming by: keep ldx off such
// multiples (FewRowsStride).
void FewRowsGemmF32(const float* x, int64_t rows, int64_t ldx, const float* packed, int64_t n,
                    int64_t k, int64_t group_begin, int64_t group_end,
                    const FewRowsEpilogue& epilogue, float* out);
// bf16 weights without bf16 instructions: each weight widened to fp32 in
// registers, fp32 inputs (bf16-rounded by the caller; for an odd k the
// input after the last one, x[m * ldx + k], must be -0: its product with
// the zero padding adds -0, which leaves every sum as it is, +0 included),
// fp32 FMAs. Reads half the bytes FewRowsGemmF32 reads on the same
// (bf16-rounded) weights and gives its results bit for bit.
void FewRowsGemmBf16AsF32(const float* x, int64_t rows, int64_t ldx, const uint16_t* packed,
                          int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                          const FewRowsEpilogue& epilogue, float* out);
// fp32 weights [n][k] on a CPU with AVX2 and FMA (few_rows_gemm_avx2.cc),
// up to kFewRowsF32Avx2MaxRows rows: each sum in 8 lanes, each lane's
// inputs in their order one FMA at a time (inputs past k up to a multiple
// of 8 as 0 x 0), then the lanes added as ((l0 + l1) + (l2 + l3)) +
// ((l4 + l5) + (l6 + l7)).
void FewRowsGemmF32Avx2(const float* x, int64_t rows, int64_t ldx, const float* packed, int64_t n,
                        int64_t k, int64_t group_begin, int64_t group_end,
                        const FewRowsEpilogue& epilogue, float* out);
// bf16 weights on the same CPUs, in their [n][k16] layout above, widened
// in registers, up to kFewRowsMax rows of fp32 inputs (bf16-rounded by the
// caller): the sums FewRowsGemmF32Avx2 makes on the same bf16-rounded
// weights, bit for bit, from half the bytes.
void FewRowsGemmBf16ColumnsAvx2(const float* x, int64_t rows, int64_t ldx, const uint16_t* packed,
                                int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                                const FewRowsEpilogue& epilogue, float* out);
// Columns [col_begin, col_end) of such a bf16 weight widened to fp32 in
// their places in `out`, the whole weight [n][k] (oneDNN's `ba`), exactly.
void WidenBf16ColumnsAvx2(const uint16_t* packed, int64_t k, int64_t col_begin, int64_t col_end,
                          float* out);
void FewRowsGemmBf16(const uint16_t* x, int64_t rows, int64_t ldx, const uint16_t* packed,
                     int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                     const FewRowsEpilogue& epilogue, float* out);

}  // namespace encoderd::kernels
