// The CPU implementation of kernels/linear.h (arguments already validated):
// oneDNN, the project's own int8 kernel on AVX512-VNNI, and its fp32 and
// bf16 kernels for a few rows on AVX-512.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/linear.h"

namespace encoderd::kernels {

// A Linear's weights packed for the CPU (PackedWeight::impl() of a CPU
// weight).
struct CpuPackedWeight final : PackedWeight::Impl {
  size_t bytes() const override;
  bool bf16_values() const override { return bf16_compute; }
  // bf16 weights run on bf16 GEMMs only where the CPU has AVX512-BF16 (and
  // it pays: cpu_features.h); elsewhere fp32 GEMMs multiply their values
  // (few_rows_bf16, widened) by inputs rounded the same way, which gives
  // bf16 products with fp32 accumulation at fp32 GEMM speed (oneDNN's bf16
  // emulation is ~5x slower here).
  bool bf16_compute = false;
  // int8 weights (DType::kInt8): quantized once per output channel,
  // symmetric, w[n, k] ~ weight_scale[n] * q[n, k] with q in [-127, 127].
  // Activations are quantized per row at run time (asymmetric uint8). With
  // AVX512-VNNI, or else AVX2 + FMA, the GEMM is uint8 x int8 -> int32 in
  // the project's own kernels (int8_gemm_avx512.h; the same int32 sums and
  // results on either), which apply the weight and row scales, zero-point
  // compensation, bias and epilogue to each tile; elsewhere the same
  // quantized values run as fp32 on oneDNN (weights dequantized, each input
  // row quantized and dequantized), which gives the same products with fp32
  // accumulation.
  bool int8_compute = false;
  std::vector<float> weight_scale;  // [out]; int8_compute: padded with 0 to whole column groups
  std::vector<float> weight_comp;   // [out]: weight_scale[n] * sum_k q[n, k]
  struct FreeBytes {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<int8_t[], FreeBytes> int8_weight;  // int8_compute: the kernel's layout
  dnnl::memory::desc weight_desc;  // the layout oneDNN chose; fixed for every row count
  // Up to kFewRowsMax rows (more for some weights: linear_cpu.cc,
  // FewRowsLimit) run on the project's few-row kernels
  // (few_rows_gemm_avx512.h): set when the CPU has the instructions and
  // they can read the weights, `weight` in the layout oneDNN chose or
  // few_rows_bf16.
  bool few_rows = false;
  // bf16 weights where the CPU has AVX-512 or AVX2 + FMA but not
  // AVX512-BF16: the weight in bf16 in the few-row layout of AVX-512
  // (PackFewRowsBf16) or of AVX2 (PackBf16Columns), which up to
  // kFewRowsBf16AsF32MaxRows rows (AVX-512) or kFewRowsBf16AsF32Avx2MaxRows
  // (AVX2) read widened in registers; few_rows_bf16_bytes long. More rows
  // run on oneDNN's fp32 GEMMs, on `weight` where it is kept, else
  // (widened_for_gemm()) on the copy widened at each call.
  std::unique_ptr<uint16_t[], FreeBytes> few_rows_bf16;
  int64_t few_rows_bf16_bytes = 0;
  // The fp32 layouts of oneDNN's GEMMs that linear_cpu.cc's
  // WidenFewRowsBf16 writes: from AVX-512's copy BA16a64b, oneDNN's choice
  // there ([n/64][k rounded up to 16][64], the fp32 few-row layout), or
  // plain ab ([k][n]); from AVX2's, ba ([n][k]), what linear_cpu.cc asks
  // of oneDNN for bf16 weights there.
  enum class WideLayout { kNone, kBlocked, kPlain, kColumns };
  // Not kNone where weight_desc's layout is one of those: few_rows_bf16 is
  // the only copy, `weight` a null handle, and the threads widen it into
  // one scratch in this layout for each call's GEMMs (GemmWidened). Such a
  // weight takes the memory of a bf16_compute one, half an fp32 one.
  WideLayout widened = WideLayout::kNone;
  bool widened_for_gemm() const { return widened != WideLayout::kNone; }
  dnnl::memory weight;  // null handle when int8_compute or widened_for_gemm()
  dnnl::memory bias;    // [1, out] fp32, null handle: no bias (int8_compute: added by the epilogue)
  // One matmul per (rows, epilogue, bf16 output): oneDNN JITs per shape.
  // Rows are split into chunks from a small set of sizes (see
  // linear_cpu.cc) so the cache stays bounded whatever batch sizes arrive:
  // at most kMaxPrimitivesPerEpilogue for each (epilogue, bf16 output).
  std::mutex mu;
  std::map<std::tuple<int64_t, int, bool>, dnnl::matmul> primitives;
};

// The most row counts a weight's oneDNN GEMMs are called with, per
// (epilogue, bf16 output), so the most primitives it keeps for each:
// 2048, 1024 and 512; the multiples of 16 from 144 to 496; 1 to 128
// (linear_cpu.cc, ChunkRows).
constexpr int64_t kMaxPrimitivesPerEpilogue = 154;

std::unique_ptr<PackedWeight::Impl> PackWeightCpu(const CpuContext& ctx, const float* weight,
                                                  const float* bias, int64_t out_features,
                                                  int64_t in_features, DType type);

// x and y: float32, or bfloat16 (uint16) with a bf16 weight, y not with
// kResidual (kernels/linear.h).
void LinearCpu(const CpuContext& ctx, DType x_dtype, const void* x, int64_t rows,
               const PackedWeight& weight, Epilogue epilogue, const float* residual, DType y_dtype,
               void* y);

// kernels/linear.h's LinearRunsOnTeam for a CPU weight.
bool LinearRunsOnTeamCpu(const PackedWeight& weight, int64_t rows);

// kernels/linear.h's FeedForward when both weights run on bf16 GEMMs
// (bf16_compute) and the rows are more than the few-row kernels take, fused
// (linear_cpu.cc); false, having done nothing, otherwise: the pair then runs
// as two LinearCpu calls. x: float32, or bfloat16 (uint16); add_to_y as in
// kernels/linear.h.
bool FeedForwardCpu(const CpuContext& ctx, DType x_dtype, const void* x, int64_t rows,
                    const PackedWeight& w_in, Epilogue activation, const PackedWeight& w_out,
                    float* hidden, float* y, bool add_to_y);

}  // namespace encoderd::kernels
