// LayerNorm over the last dimension of packed activations, optionally fused
// with the residual add that precedes it in post-norm encoder layers.
#pragma once

#include <cstdint>

#include "kernels/cpu_context.h"

namespace encoderd::kernels {

// out[t, :] = (s - mean(s)) / sqrt(var(s) + eps) * gamma + beta, where
// s = x[t, :] + residual[t, :] (or x[t, :] when residual is null); var is the
// biased variance, as torch.nn.LayerNorm. Statistics in fp32. gamma/beta null
// mean 1/0 (elementwise_affine=False). out may alias x or residual (in place).
// All tensors [rows, hidden] row-major. Throws std::invalid_argument on
// non-positive hidden, negative rows, eps < 0 or null x/out.
void AddLayerNorm(const CpuContext& ctx, const float* x, const float* residual, const float* gamma,
                  const float* beta, int64_t rows, int64_t hidden, float eps, float* out);

// AddLayerNorm without a residual (pre-norm layers, final norms).
inline void LayerNorm(const CpuContext& ctx, const float* x, const float* gamma, const float* beta,
                      int64_t rows, int64_t hidden, float eps, float* out) {
  AddLayerNorm(ctx, x, nullptr, gamma, beta, rows, hidden, eps, out);
}

}  // namespace encoderd::kernels
