// The int8 Linear's GEMM (kernels/cpu/linear_cpu.cc): uint8 input rows
// times int8 weights, int32 accumulation, with the int8 epilogue applied to
// each tile of results while it is in registers. Call Int8GemmVnni and
// Int8GemmVnniFewRows only when the CPU has AVX-512 F, BW and VNNI
// (vpdpbusd; int8_gemm_avx512.cc), Int8GemmAvx2 only when it has AVX2 and
// FMA (int8_gemm_avx2.cc); PackInt8Vnni is portable.
//
// Weight layout: output columns in groups of 64; a group holds, for each
// step of 4 inputs (Int8VnniSteps(k), k / 4 rounded up), the 4 weights of each of its 64 columns,
// [k4][64][4] bytes, so one step is four 64-byte vectors of 16 columns;
// groups follow each other. Columns past n and inputs past k are zero.
// (oneDNN's brgemm lays VNNI int8 weights out the same way.)
#pragma once

#include <cstdint>

namespace encoderd::kernels {

constexpr int64_t kInt8GroupColumns = 64;

// Internal linkage: this header is also compiled with AVX-512 flags, and no
// AVX-512 copy of a shared inline function may be chosen for generic code.
namespace {

// Groups of columns, steps of 4 inputs, and packed bytes for [n, k] weights.
inline int64_t Int8VnniGroups(int64_t n) { return (n + kInt8GroupColumns - 1) / kInt8GroupColumns; }
inline int64_t Int8VnniSteps(int64_t k) { return (k + 3) / 4; }
inline int64_t Int8VnniPackedBytes(int64_t n, int64_t k) {
  return Int8VnniGroups(n) * Int8VnniSteps(k) * 4 * kInt8GroupColumns;
}
// The stride of the uint8 input rows: k rounded up to 4, the bytes past k
// zero.
inline int64_t Int8VnniRowStride(int64_t k) { return Int8VnniSteps(k) * 4; }

}  // namespace

// Packs q [n, k] (one output channel per row) into `packed`
// (Int8VnniPackedBytes(n, k) bytes).
void PackInt8Vnni(const int8_t* q, int64_t n, int64_t k, int8_t* packed);

// A row's quantization: x ~ scale * (q - zero). No member initializers: an
// inline constructor defined here would have external linkage.
struct Int8RowQuant {
  float scale;
  float zero;
};

// What turns row m's int32 sums into outputs, with s = rows[m].scale and
// z = rows[m].zero, in fp32 and in this order:
//   v = s * (weight_scale[j] * float(acc[m, j]))
//   v = fma(-(s * z), comp[j], v)           (one rounding)
//   out[m, j] = act(v + bias[j] + residual[m, j])
// act GELU (erf form, within 1e-6 of it), max(x, 0) or none. weight_scale
// holds a value for every packed column (Int8VnniGroups(n) * 64, zero past
// n); bias and residual may be null; residual and out are [rows, n] and may
// alias.
struct Int8Epilogue {
  const float* weight_scale;
  const float* comp;
  const float* bias;
  const Int8RowQuant* rows;
  const float* residual;
  bool gelu;
  bool relu;
};

// out [rows, n] for the column groups [group_begin, group_end) and the rows
// [row_begin, row_end) of x (uint8 rows of Int8VnniRowStride(k) bytes):
// one thread's share of an int8 Linear. A call reads each group's weights
// from memory once (prefetched ahead) and from cache for its further rows.
void Int8GemmVnni(const uint8_t* x, int64_t row_begin, int64_t row_end, const int8_t* packed,
                  int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                  const Int8Epilogue& epilogue, float* out);

// out [rows, n] for rows <= kFewRowsMax (few_rows_gemm_avx512.h) and the
// column groups [group_begin, group_end), all rows in one tile as the
// few-row fp32 and bf16 kernels take them, so that each weight is read from
// memory once and memory stays busy throughout; x's rows are ldx bytes
// apart (a multiple of 4, zero past k; FewRowsStride keeps them off
// multiples of 4 KiB). The same results as Int8GemmVnni, bit for bit.
void Int8GemmVnniFewRows(const uint8_t* x, int64_t rows, int64_t ldx, const int8_t* packed,
                         int64_t n, int64_t k, int64_t group_begin, int64_t group_end,
                         const Int8Epilogue& epilogue, float* out);

// The same Linear on a CPU with AVX2 and FMA but not AVX512-VNNI
// (int8_gemm_avx2.cc), on the same packed weights: the same int32 sums,
// exactly, and the same epilogue, so the same results bit for bit, except
// after GELU, whose erf it evaluates another way (avx2_math.h: the two
// differ in the last bits, each within 1e-6 of erf). Its inputs are each row's uint8 values
// widened to 16 bits in pairs for vpmaddwd: step s (inputs 4s..4s+3, x0..x3)
// as two 32-bit words, x0 | x2 << 16 and x1 | x3 << 16, so a row is
// 2 * Int8VnniSteps(k) words; rows ldx words apart. out [rows, n] for the
// rows [row_begin, row_end) and the column groups [group_begin, group_end).
void Int8GemmAvx2(const uint32_t* x, int64_t ldx, int64_t row_begin, int64_t row_end,
                  const int8_t* packed, int64_t n, int64_t k, int64_t group_begin,
                  int64_t group_end, const Int8Epilogue& epilogue, float* out);

}  // namespace encoderd::kernels
