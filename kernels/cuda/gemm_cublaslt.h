// Linear layers on the GPU: cuBLASLt fp16/bf16 GEMMs (fp32 accumulation) with
// the bias, ReLU and residual fused into cuBLASLt's epilogue. GELU is the exact
// erf form, as on the CPU: cuBLASLt's own GELU epilogue is the tanh
// approximation, so the GEMM stores x W^T + b and CudaGeluInPlace follows
// (one more pass over y, and y is rounded to fp16/bf16 once before GELU as
// well as after).
#pragma once

#include <cstdint>
#include <memory>

#include "core/op_types.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/linear.h"

namespace encoderd::kernels {

// y[m, :] = epilogue(x[m, :] W^T + bias) for m < rows, queued on ctx.stream().
// Device pointers of `dtype`, row-major and dense: x [rows, in_features],
// weight [out_features, in_features] (torch.nn.Linear's layout), bias
// [out_features] or null (no bias term), residual [rows, out_features] (only
// for kResidual; it may alias y, which makes the update in place), y
// [rows, out_features]; x must not alias y. rows == 0 is a no-op. Throws
// std::invalid_argument on bad sizes, missing pointers or a dtype other than
// float16 / bfloat16, and
// std::runtime_error when cuBLASLt has no algorithm or fails.
void GemmLt(CudaContext& ctx, DType dtype, const void* x, int64_t rows, const void* weight,
            const void* bias, int64_t out_features, int64_t in_features, Epilogue epilogue,
            const void* residual, void* y);

// kernels::PackedWeight on CUDA: weight and bias uploaded as `dtype`
// (float16 or bfloat16) from host fp32 (arguments already validated).
std::unique_ptr<PackedWeight::Impl> PackWeightCuda(CudaContext& ctx, const float* weight,
                                                   const float* bias, int64_t out_features,
                                                   int64_t in_features, DType dtype);
// kernels::Linear on CUDA: GemmLt with a weight of PackWeightCuda.
void LinearCuda(CudaContext& ctx, DType dtype, const void* x, int64_t rows,
                const PackedWeight& weight, Epilogue epilogue, const void* residual, void* y);

}  // namespace encoderd::kernels
