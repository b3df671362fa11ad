// Multi-head self-attention over packed QKV (no padding, no mask).
#pragma once

#include <cstdint>

#include "kernels/cpu_context.h"

namespace encoderd::kernels {

// For every sequence b < batch (tokens cu_seqlens[b] .. cu_seqlens[b+1]) and
// head h < heads: out_h = softmax(q_h k_h^T * scale) v_h, exact fp32 softmax.
// qkv: [total_tokens, 3 * heads * head_dim] row-major, each row q | k | v with
// head h at columns h * head_dim of its part (the layout of the fused
// in-projection). out: [total_tokens, heads * head_dim], heads concatenated,
// must not alias qkv. Work is split over (sequence, head, block of query rows)
// on ctx.num_threads() threads; scores are formed a few query rows at a time,
// never as a full L x L matrix. Throws std::invalid_argument on malformed
// cu_seqlens or non-positive heads / head_dim.
void Attention(const CpuContext& ctx, const float* qkv, const int32_t* cu_seqlens, int64_t batch,
               int64_t total_tokens, int64_t heads, int64_t head_dim, float scale, float* out);

}  // namespace encoderd::kernels
