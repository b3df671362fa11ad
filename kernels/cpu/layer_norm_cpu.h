// The CPU LayerNorm (kernels/layer_norm.h, arguments already validated), and
// its row kernel, shared with the embedding and pooling ops.
#pragma once

#include <cstdint>

#include "kernels/cpu_context.h"

namespace encoderd::kernels {

// out_bf16: null, or a bf16 copy of out, each row rounded while in L1; out
// may then be null (only the copy is written).
void AddLayerNormCpu(const CpuContext& ctx, const float* x, const float* residual,
                     const float* gamma, const float* beta, int64_t rows, int64_t hidden, float eps,
                     float* out, uint16_t* out_bf16);

// out = LN(x + residual) * gamma + beta for one row of n values (see
// kernels/layer_norm.h for null pointers and aliasing), in the version
// GetCpuFeatures() allows.
void AddLayerNormRow(const float* x, const float* residual, const float* gamma, const float* beta,
                     int64_t n, float eps, float* out);

// The versions of AddLayerNormRow, each the same code vectorised for its
// instruction set (their sums round differently). For tests: call one only
// where the CPU has its instructions.
enum class LayerNormRowIsa { kAvx512, kAvx2, kGeneric };
LayerNormRowIsa LayerNormRowIsaInUse();
void AddLayerNormRowWith(LayerNormRowIsa isa, const float* x, const float* residual,
                         const float* gamma, const float* beta, int64_t n, float eps, float* out);

// Minimum elements per thread before a row loop is split across threads.
constexpr int64_t kMinParallelElements = 1 << 15;

}  // namespace encoderd::kernels
