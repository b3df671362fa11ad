// Multi-head self-attention over packed QKV (no padding, no mask).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/context.h"

namespace encoderd::kernels {

// For every sequence b < batch (tokens cu_seqlens[b] .. cu_seqlens[b+1]) and
// head h < heads: out_h = softmax(q_h k_h^T * scale) v_h, softmax in fp32.
// qkv: [total_tokens, 3 * heads * head_dim] activations of `dtype`, each row
// q | k | v with head h at columns h * head_dim of its part (the layout of the
// fused in-projection). out: [total_tokens, heads * head_dim], heads
// concatenated, must not alias qkv. cu_seqlens: batch + 1 int32 on ctx's
// device; max_seqlen: the longest sequence (CUDA sizes its grid by it; the
// CPU reads the lengths themselves). Scores are formed a block of query rows
// at a time, never as a full L x L matrix.
// CPU: split over (sequence, head, block of query rows) on ctx's threads.
// CUDA: flash-attention style on the tensor cores (kernels/cuda/cuda_ops.h:
// head_dim a multiple of 16 up to 128, qkv 16-byte and out 4-byte aligned).
// matmul_dtype: what the two matmuls (q k^T and p v) take their inputs in;
// they accumulate in fp32 either way. On CUDA it must be the activations'
// dtype. On the CPU it is float32, or bfloat16 (bfloat16 and int8 models):
// q, k, v and the probabilities are rounded to bf16 and multiplied with
// AVX512-BF16 where the CPU has it and head_dim % 32 == 0, else the matmuls
// run in fp32 (ENCODERD_CPU_DISABLE=avx512_bf16 forces that). The CPU also
// takes dtype bfloat16 with bfloat16 matmuls: qkv and out hold bf16 values,
// which the bf16 kernel reads and writes as they are: the bits of the
// float32 call on the values widened, rounded to bf16 (q * scale is rounded
// again, as that call rounds it; the same bits as the float32 call on the
// fp32 values these bf16 ones round when scale is a power of two), except
// that a subnormal output becomes 0 (the bf16 instructions' conversion). So
// no pass converts them between a bf16 model's Linear layers and attention.
// Throws std::invalid_argument on non-positive heads / head_dim, malformed
// cu_seqlens (checked on the CPU, where they live on the host), a dtype the
// device's activations are not or a matmul_dtype the device cannot pair with
// it.
// Whether Attention on ctx's device reads and writes bfloat16 values as they
// are (above), rather than widening them to the float32 path: the CPU's bf16
// kernel, where the CPU has AVX512-BF16 and head_dim % 32 == 0. False on
// CUDA, whose activations are 16-bit anyway.
bool AttentionTakesBf16Values(const Context& ctx, int64_t head_dim);

// A bias on the scores by relative position (MPNet's relative attention
// bias): the score of query i and key j of a sequence, in head h, gets
// values[h * width + center + (j - i)] added after the scaling, before the
// softmax. fp32 values on the host; width = 2 * center + 1, and every
// sequence at most center + 1 tokens long. Only the CPU takes one (CUDA
// throws std::invalid_argument).
struct RelativeBias {
  const float* values = nullptr;
  int64_t center = 0;
  int64_t width() const { return 2 * center + 1; }
};

// DeBERTa's disentangled attention terms (content to position and position
// to content): the score of query i and key j of a sequence, in head h, gets
// q_i . key[h][c] + k_j . query[h][c] added before the softmax, where c =
// index[center + i - j] (the relative position's row of the model's
// relative embeddings) and q_i, k_j are the head's rows of qkv as they are
// (the tables carry their scale). key and query: [heads][head_dim][columns]
// fp32 on the host, each head's rows of the projected relative embeddings
// transposed; index: 2 * center + 1 values in [0, columns), non-decreasing;
// every sequence at most center + 1 tokens long. In fp32 whatever the
// matmul dtype (bf16 q and k widened). Only the CPU takes one (CUDA throws
// std::invalid_argument), and not beside a RelativeBias.
struct DisentangledBias {
  const float* key = nullptr;
  const float* query = nullptr;
  int64_t columns = 0;
  const int32_t* index = nullptr;
  int64_t center = 0;
};

// Keys masked out of the softmax (fairseq's and torchtext's key padding
// mask): key t of the batch (t < total_tokens, its token index) gets
// values[t] added to its score in every query row of its sequence, after
// the scaling: 0 keeps it, -infinity masks it (its probability is 0, or
// under 1e-37 where a kernel's exp stops at -87.3). fp32 on the host; every
// sequence must keep at least one key. Only the CPU takes one (CUDA throws
// std::invalid_argument), and not beside a RelativeBias or DisentangledBias.
struct KeyBias {
  const float* values = nullptr;
};

void Attention(const Context& ctx, DType dtype, DType matmul_dtype, const void* qkv,
               const int32_t* cu_seqlens, int64_t batch, int64_t total_tokens, int32_t max_seqlen,
               int64_t heads, int64_t head_dim, float scale, void* out,
               const RelativeBias* bias = nullptr, const DisentangledBias* disentangled = nullptr,
               const KeyBias* key_bias = nullptr);

}  // namespace encoderd::kernels
