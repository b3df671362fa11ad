// Linear layers on the GPU: cuBLASLt fp16/bf16 GEMMs (fp32 accumulation) with
// the bias, activation and residual fused into the epilogue.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_context.h"

namespace encoderd::kernels {

enum class GemmEpilogue {
  kBias,          // x W^T + b
  kBiasGelu,      // gelu(x W^T + b); cuBLASLt's GELU is the tanh approximation
  kBiasRelu,      // relu(x W^T + b)
  kBiasResidual,  // x W^T + b + residual (beta = 1 with C = residual)
};

// y[m, :] = epilogue(x[m, :] W^T + bias) for m < rows, queued on ctx.stream().
// Device pointers of `dtype`, row-major and dense: x [rows, in_features],
// weight [out_features, in_features] (torch.nn.Linear's layout), bias
// [out_features] or null (no bias term), residual [rows, out_features] (only
// for kBiasResidual; it may alias y, which makes the update in place), y
// [rows, out_features]; x must not alias y. rows == 0 is a no-op. Throws
// std::invalid_argument on bad sizes or missing pointers and
// std::runtime_error when cuBLASLt has no algorithm or fails.
void GemmLt(CudaContext& ctx, CudaDType dtype, const void* x, int64_t rows, const void* weight,
            const void* bias, int64_t out_features, int64_t in_features, GemmEpilogue epilogue,
            const void* residual, void* y);

}  // namespace encoderd::kernels
