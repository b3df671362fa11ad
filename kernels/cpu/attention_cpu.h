// CPU implementation of kernels/attention.h (arguments already validated).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/attention.h"
#include "kernels/cpu_context.h"

namespace encoderd::kernels {

// A work item: the query rows [row_begin, row_end) of one head of the
// sequence of `len` tokens from token seq_begin on.
struct AttentionItem {
  int64_t seq_begin, len, head, row_begin, row_end;
};

// bf16_matmuls: q k^T and p v with bf16 inputs where the CPU has
// AVX512-BF16 and head_dim % 32 == 0 (attention_avx512.h), else in fp32:
// on AVX-512 (attention_avx512.h) or AVX2 + FMA (attention_avx2.h) where
// head_dim % 16 == 0, else on the generic path below. values: qkv's and
// out's type, float32, or bfloat16 with bf16_matmuls (read and written as
// they are by the bf16 kernel; elsewhere widened to fp32 first, and the
// output rounded). bias: kernels/attention.h's, or nullptr.
void AttentionCpu(const CpuContext& ctx, DType values, const void* qkv, const int32_t* cu_seqlens,
                  int64_t batch, int64_t heads, int64_t head_dim, float scale, bool bf16_matmuls,
                  void* out, const RelativeBias* bias = nullptr);

// Whether the bf16 kernel runs for this head_dim on this CPU (AVX512-F,
// -BW and -BF16, head_dim % 32 == 0): bf16 matmuls, and bf16 values read
// and written as they are.
bool AttentionCpuTakesBf16Values(int64_t head_dim);

// Per-thread scratch of at least `floats` floats, valid until the calling
// thread's next call.
float* AttentionScratch(int64_t floats);

// The row stride, in floats, of the AVX-512 and AVX2 kernels' transposed
// keys (one row per head-dim word, lp keys, lp a multiple of 16): an odd
// number of 64-byte lines. A score tile reads 64 keys of every row; rows a
// power of two of lines apart (lp = 256 or 512) put those lines in a few of
// L1's sets, more than their ways hold, and evict the block while it is
// reused. kernels/bench/attention_bench, 4 x 512 tokens, 2 threads, 3
// rounds alternated: fp32 13-22%, bf16 9-19% faster (the AVX2 kernel
// 11-29%); 32 x U[16, 256] within noise. `encoderd bench --workloads W4
// --op-profile` (4 x 512): the attention op 4-11% (fp32) and 5-13% (bf16)
// faster, whole forwards within noise; outputs bit for bit the same.
constexpr int64_t KeyRowStride(int64_t lp) { return (lp / 16) % 2 == 0 ? lp + 16 : lp; }

namespace {
// s[j] += bias[j - i] for j < len: the relative position bias of query row
// i (bias: the head's values at distance 0, RelativeBias::center; nullptr:
// none). Internal linkage, so that the copy compiled into an AVX-512 kernel
// is never the one generic code calls.
inline void AddRelativeBias(float* s, const float* bias, int64_t i, int64_t len) {
  if (bias == nullptr) return;
  const float* row = bias - i;
  for (int64_t j = 0; j < len; ++j) s[j] += row[j];
}
}  // namespace

// Single-threaded reference-style path for any head_dim (also used where the
// CPU lacks AVX2 + FMA or head_dim % 16 != 0). Exposed for the benchmark/tests.
// bias: the head's relative position bias at distance 0 (AddRelativeBias),
// or nullptr; the same argument in every row kernel.
void AttentionRowsGeneric(const float* qkv, int64_t seq_begin, int64_t len, int64_t head,
                          int64_t heads, int64_t head_dim, float scale, int64_t row_begin,
                          int64_t row_end, float* out, const float* bias = nullptr);

}  // namespace encoderd::kernels
