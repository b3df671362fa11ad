// The CUDA implementations of the ops of kernels/ (whose device-neutral
// entry points call them) other than the GEMM. Plain C++ over device
// pointers, sizes and a context: no CUDA type appears here. Every launcher
// queues its work on ctx.stream() and returns without waiting. Activations
// and tables are `dtype` (fp16 or bf16); statistics, softmax and
// accumulations are fp32. Sizes are checked on the host (std::invalid_argument);
// ids and cu_seqlens live on the device and must have been validated by the
// caller (the encoder checks them on the host before uploading).
#pragma once

#include <cstdint>

#include "core/op_types.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/embeddings.h"

namespace encoderd::kernels {

// out[t, :] = LN(word[ids[t]] + position[position_ids[t]] + token_type[type_ids[t]]),
// kernels::EmbeddingLayerNorm on CUDA: tables of `dtype` on the device (their
// row counts are not used: the caller checked the ids). type_ids null means
// type 0; LN runs only when gamma (fp32, device) is non-null, beta (fp32) may
// be null.
void CudaEmbeddingLayerNorm(CudaContext& ctx, DType dtype, const EmbeddingTables& tables,
                            const int32_t* ids, const int32_t* position_ids,
                            const int32_t* type_ids, int64_t tokens, const float* gamma,
                            const float* beta, float eps, void* out);

// out = LN(x + residual) per row, as kernels::AddLayerNorm: residual may be
// null, gamma fp32 (required: the row kernels take a null gamma for "no
// LayerNorm", the embeddings' case, and stored the sum unnormalised), beta
// fp32 (null: 0), out may alias x or residual; hidden <= kCudaMaxNormHidden.
void CudaAddLayerNorm(CudaContext& ctx, DType dtype, const void* x, const void* residual,
                      const float* gamma, const float* beta, int64_t rows, int64_t hidden,
                      float eps, void* out);

// Varlen multi-head self-attention over packed QKV, as kernels::Attention
// (same layouts; cu_seqlens on the device, max_seqlen its longest sequence).
// Flash-attention style on the tensor cores: tiles of keys in shared memory,
// online softmax in fp32, no score matrix in global memory. head_dim must be
// a multiple of 16 up to 128 (CudaAttentionSupports); qkv 16-byte and out
// 4-byte aligned (std::invalid_argument otherwise).
// 16-row m-tiles per warp the attention kernel uses for head sizes up to 64:
// 2, or 1 with ENCODERD_CUDA_ATTENTION_MTILES=1 (read at every launch, so
// that tests and benchmarks can run both; a recorded CUDA graph keeps the
// kernel it was recorded with).
int CudaAttentionMTiles();
void CudaAttention(CudaContext& ctx, DType dtype, const void* qkv, const int32_t* cu_seqlens,
                   int64_t batch, int32_t max_seqlen, int64_t heads, int64_t head_dim, float scale,
                   void* out);

// out[b, :] (fp32) = sequence b of hidden [tokens, hidden] pooled by `mode`
// (every Pooling mode and pool_start, a device array or null, as
// kernels::Pool; an empty sequence gives zeros, where kernels::Pool throws:
// the encoder never passes one).
void CudaPool(CudaContext& ctx, DType dtype, const void* hidden_states, const int32_t* cu_seqlens,
              const int32_t* pool_start, int64_t batch, int64_t hidden, Pooling mode, float* out);

// x[i] = gelu(x[i]) for i < n, in place, in the exact erf form computed in
// fp32 (torch.nn.functional.gelu's default; kernels::GeluInPlace on the CPU).
void CudaGeluInPlace(CudaContext& ctx, DType dtype, void* x, int64_t n);

// Element-wise conversions between fp32 and `dtype` (round to nearest even).
void CudaCastFromFloat(CudaContext& ctx, DType dtype, const float* in, int64_t n, void* out);
void CudaCastToFloat(CudaContext& ctx, DType dtype, const void* in, int64_t n, float* out);

}  // namespace encoderd::kernels
