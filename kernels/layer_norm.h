// LayerNorm over the last dimension of packed activations, optionally fused
// with the residual add that precedes it in post-norm encoder layers.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/context.h"

namespace encoderd::kernels {

// out[t, :] = (s - mean(s)) / sqrt(var(s) + eps) * gamma + beta, where
// s = x[t, :] + residual[t, :] (or x[t, :] when residual is null); var is the
// biased variance, as torch.nn.LayerNorm. Statistics in fp32. x, residual and
// out: [rows, hidden] row-major activations of `dtype` on ctx's device;
// gamma/beta: fp32 [hidden] on ctx's device, null meaning 1/0
// (elementwise_affine=False; on CUDA gamma is required). out may alias x or
// residual (in place). Throws std::invalid_argument on non-positive hidden
// (or one over kCudaMaxNormHidden on CUDA), negative rows, eps < 0, null
// x/out, null gamma on CUDA or a dtype the device's activations are not.
void AddLayerNorm(const Context& ctx, DType dtype, const void* x, const void* residual,
                  const float* gamma, const float* beta, int64_t rows, int64_t hidden, float eps,
                  void* out);

// AddLayerNorm that also writes its output rounded to bf16 (nearest even)
// into out_bf16 [rows, hidden] (bf16 values as uint16, not aliasing the
// others), in the same pass: on the CPU, for the bf16 Linear layers that
// read it next (kernels/linear.h), so that no pass of their own converts
// the float32 output, which the residual still needs. out_bf16 null: as
// above. out null (with out_bf16): only the bf16 copy is written, for an
// output that nothing reads in float32 (pre-norm layers' normed input).
// Throws std::invalid_argument on a non-null out_bf16 on CUDA, whose
// activations are 16-bit already.
void AddLayerNorm(const Context& ctx, DType dtype, const void* x, const void* residual,
                  const float* gamma, const float* beta, int64_t rows, int64_t hidden, float eps,
                  void* out, void* out_bf16);

// AddLayerNorm without a residual (pre-norm layers, final norms).
inline void LayerNorm(const Context& ctx, DType dtype, const void* x, const float* gamma,
                      const float* beta, int64_t rows, int64_t hidden, float eps, void* out) {
  AddLayerNorm(ctx, dtype, x, nullptr, gamma, beta, rows, hidden, eps, out);
}

}  // namespace encoderd::kernels
