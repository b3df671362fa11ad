// Row kernel shared by the CPU LayerNorm and embedding ops.
#pragma once

#include <cstdint>

namespace encoderd::kernels {

// out = LN(x + residual) * gamma + beta for one row of n values (see
// kernels/layer_norm.h for null pointers and aliasing).
void AddLayerNormRow(const float* x, const float* residual, const float* gamma, const float* beta,
                     int64_t n, float eps, float* out);

// Minimum elements per thread before a row loop is split across threads.
constexpr int64_t kMinParallelElements = 1 << 15;

}  // namespace encoderd::kernels
