// AVX-512 attention rows for head_dim % 16 == 0; see attention_cpu.h.
#pragma once

#include <cstdint>

#include "kernels/cpu/attention_cpu.h"

namespace encoderd::kernels {

// Computes query rows [row_begin, row_end) of one (sequence, head): K is
// transposed (and V copied) once into thread-local scratch; then for each
// sub-block of sub_rows query rows, the sub_rows x L scores (register-blocked
// 6 x 64, each K^T block reused from L1 by the whole sub-block), an exact
// softmax, and P V (each 64-row block of V reused by the whole sub-block).
// bias: the rows added to the scores (BiasRows, attention_cpu.h).
// Meanwhile the rows of `next` (the item the thread takes next, if any) are
// asked for, so that they are in cache when it starts.
void AttentionRowsAvx512(const float* qkv, int64_t seq_begin, int64_t len, int64_t head,
                         int64_t heads, int64_t head_dim, float scale, int64_t row_begin,
                         int64_t row_end, int64_t sub_rows, float* out, BiasRows bias = {},
                         const AttentionItem* next = nullptr);

// The same with q, k, v and the probabilities rounded to bf16 and both
// matmuls on AVX512-BF16 (fp32 accumulation, fp32 softmax), for head_dim %
// 32 == 0 on a CPU with AVX512-F, -BW and -BF16.
void AttentionRowsAvx512Bf16(const float* qkv, int64_t seq_begin, int64_t len, int64_t head,
                             int64_t heads, int64_t head_dim, float scale, int64_t row_begin,
                             int64_t row_end, int64_t sub_rows, float* out, BiasRows bias = {},
                             const AttentionItem* next = nullptr);

// AttentionRowsAvx512Bf16 over bf16 q, k, v and output (kernels/attention.h's
// bfloat16 activations), for the same head_dim and CPU.
void AttentionRowsAvx512Bf16Values(const uint16_t* qkv, int64_t seq_begin, int64_t len,
                                   int64_t head, int64_t heads, int64_t head_dim, float scale,
                                   int64_t row_begin, int64_t row_end, int64_t sub_rows,
                                   uint16_t* out, BiasRows bias = {},
                                   const AttentionItem* next = nullptr);

// Query rows per sub-block; measured against holding every row's scores
// (sub_rows = L, the full L x L matrix) in kernels/bench/attention_bench.
constexpr int64_t kAttentionSubRows = 32;

}  // namespace encoderd::kernels
