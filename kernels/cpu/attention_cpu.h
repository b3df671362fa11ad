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
// output rounded). bias, disentangled, key_bias: kernels/attention.h's, or
// nullptr (at most one of them).
void AttentionCpu(const CpuContext& ctx, DType values, const void* qkv, const int32_t* cu_seqlens,
                  int64_t batch, int64_t heads, int64_t head_dim, float scale, bool bf16_matmuls,
                  void* out, const RelativeBias* bias = nullptr,
                  const DisentangledBias* disentangled = nullptr,
                  const KeyBias* key_bias = nullptr);

// The disentangled terms (kernels/attention.h) of query rows [row_begin,
// row_end) of head `head` of a sequence of `len` tokens, whose rows of q
// and k are at q and k (head_dim values each, rows ld apart): out[r][j] for
// r < row_end - row_begin, j < len (rows len apart). fp32, in a fixed
// order: the same bits whichever thread runs it.
void DisentangledRows(const DisentangledBias& d, const float* q, const float* k, int64_t ld,
                      int64_t len, int64_t head, int64_t head_dim, int64_t row_begin,
                      int64_t row_end, float* out);

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

// What the row kernels add to the scores of each query row before the
// softmax: query row i gets BiasRow(bias, i)[j] on key j's score. MPNet's
// relative position bias (kernels/attention.h's RelativeBias) is the head's
// values at distance 0 with step -1 (row i reads distances -i on);
// DeBERTa's disentangled terms (DisentangledBias) a matrix of the item's
// rows, its row `first` at `base`; masked keys (KeyBias) the sequence's
// values with step 0 (one row for every query). base nullptr: no bias.
struct BiasRows {
  const float* base = nullptr;
  int64_t first = 0;
  int64_t step = 0;
};

namespace {
// Query row i's bias from key 0 on, or nullptr. Internal linkage, as
// AddBiasRow's.
inline const float* BiasRow(const BiasRows& bias, int64_t i) {
  return bias.base == nullptr ? nullptr : bias.base + (i - bias.first) * bias.step;
}

// The columns of DeBERTa's tables that query rows [row_begin, row_end) of
// a sequence of len tokens reach: i - j runs from row_begin - (len - 1) to
// row_end - 1, and the index does not decrease. Internal linkage, as
// AddBiasRow's.
struct DisentangledWindow {
  int64_t lo, width;
};
inline DisentangledWindow WindowOf(const DisentangledBias& b, int64_t len, int64_t row_begin,
                                   int64_t row_end) {
  const int64_t lo = b.index[b.center + row_begin - (len - 1)];
  return {lo, b.index[b.center + row_end - 1] + 1 - lo};
}

// The register blocks of up to block_rows rows that a row kernel makes
// over `rows` query rows taken in sub-blocks of sub_rows (each sub-block in
// blocks of block_rows, the last one shorter): the times an AVX-512 kernel
// calls NextItemPrefetch::Step per block of keys or values. Internal
// linkage, as AddBiasRow's.
inline int64_t RowBlocksInSubBlocks(int64_t rows, int64_t sub_rows, int64_t block_rows) {
  const int64_t per_sub_block = (sub_rows + block_rows - 1) / block_rows;
  return rows / sub_rows * per_sub_block + (rows % sub_rows + block_rows - 1) / block_rows;
}

// s[j] += row[j] for j < len (row: BiasRow; nullptr: none). Internal
// linkage, so that the copy compiled into an AVX-512 kernel is never the one
// generic code calls.
inline void AddBiasRow(float* s, const float* row, int64_t len) {
  if (row == nullptr) return;
  for (int64_t j = 0; j < len; ++j) s[j] += row[j];
}
}  // namespace

// Single-threaded reference-style path for any head_dim (also used where the
// CPU lacks AVX2 + FMA or head_dim % 16 != 0). Exposed for the benchmark/tests.
// bias: the rows added to the scores (BiasRows; the same argument in every
// row kernel).
void AttentionRowsGeneric(const float* qkv, int64_t seq_begin, int64_t len, int64_t head,
                          int64_t heads, int64_t head_dim, float scale, int64_t row_begin,
                          int64_t row_end, float* out, BiasRows bias = {});

}  // namespace encoderd::kernels
