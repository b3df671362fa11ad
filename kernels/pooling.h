// Per-sequence pooling of packed hidden states, and row L2 normalisation.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/op_types.h"
#include "kernels/context.h"

namespace encoderd::kernels {

// out[b, :] = pool(hidden_states[cu_seqlens[b] .. cu_seqlens[b+1]), :]) for
// b < batch, each mode as core/op_types.h describes it, summed in fp32.
// pool_start (null: 0 for every sequence) holds, per sequence, the first
// token the reducing modes read (kMean, kMax, kMeanSqrtLen, kWeightedMean;
// a token keeps its weight t + 1), clamped to [0, length - 1] so that every
// row pools at least one token; kCls and kLastToken ignore it. That is
// sentence-transformers' include_prompt = false, which leaves the prompt's
// tokens out of the pooling (engine/model/model_spec.h, ModelBundle).
// hidden_states: [cu_seqlens[batch], hidden] activations of `dtype`; out:
// fp32 [batch, hidden]; all of them and cu_seqlens on ctx's device. Throws
// std::invalid_argument on bad sizes, null pointers or a dtype the device's
// activations are not; on the CPU also on malformed cu_seqlens or an empty
// sequence (CUDA, which cannot read them on the host, gives an empty sequence
// zeros: the encoder never passes one).
void Pool(const Context& ctx, DType dtype, const void* hidden_states, const int32_t* cu_seqlens,
          const int32_t* pool_start, int64_t batch, int64_t hidden, Pooling mode, float* out);

// On the host, fp32 (the heads' rows on every device):
// x[r, :] /= max(||x[r, :]||_2, eps) in place, as torch.nn.functional.normalize.
void L2NormalizeRows(float* x, int64_t rows, int64_t dim, float eps = 1e-12f);

}  // namespace encoderd::kernels
