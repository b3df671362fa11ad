// AVX2 + FMA attention rows for head_dim % 16 == 0; see attention_cpu.h.
#pragma once

#include <cstdint>

#include "kernels/cpu/attention_cpu.h"

namespace encoderd::kernels {

// Computes query rows [row_begin, row_end) of one (sequence, head) in fp32,
// blocked as AttentionRowsAvx512 is (attention_avx512.h), on a CPU with
// AVX2 and FMA, asking for the rows of `next` meanwhile as the AVX-512
// kernels do.
void AttentionRowsAvx2(const float* qkv, int64_t seq_begin, int64_t len, int64_t head,
                       int64_t heads, int64_t head_dim, float scale, int64_t row_begin,
                       int64_t row_end, int64_t sub_rows, float* out, BiasRows bias = {},
                       const AttentionItem* next = nullptr);

}  // namespace encoderd::kernels
