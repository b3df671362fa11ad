// Per-sequence pooling of packed hidden states, and row L2 normalisation.
#pragma once

#include <cstdint>

#include "core/op_types.h"
#include "kernels/cpu_context.h"

namespace encoderd::kernels {

// out[b, :] = pool(hidden_states[cu_seqlens[b] .. cu_seqlens[b+1]), :]) for
// b < batch, each mode as core/op_types.h describes it. hidden_states: [cu_seqlens[batch], hidden];
// out: [batch, hidden]. Throws std::invalid_argument on malformed cu_seqlens, an empty sequence or
// bad sizes.
void Pool(const CpuContext& ctx, const float* hidden_states, const int32_t* cu_seqlens,
          int64_t batch, int64_t hidden, Pooling mode, float* out);

// x[r, :] /= max(||x[r, :]||_2, eps) in place, as torch.nn.functional.normalize.
void L2NormalizeRows(float* x, int64_t rows, int64_t dim, float eps = 1e-12f);

}  // namespace encoderd::kernels
