// Token + position + token-type embeddings, optionally followed by LayerNorm,
// over packed token ids.
#pragma once

#include <cstdint>

#include "kernels/cpu_context.h"

namespace encoderd::kernels {

// fp32 row-major embedding tables [rows, hidden]. position and token_type may
// be null (the model has no such table).
struct EmbeddingTables {
  const float* word = nullptr;
  int64_t word_rows = 0;
  const float* position = nullptr;
  int64_t position_rows = 0;
  const float* token_type = nullptr;
  int64_t token_type_rows = 0;
  int64_t hidden = 0;
};

// out[t, :] = LN(word[ids[t]] + position[position_ids[t]] + token_type[type_ids[t]])
// The tables need not be aligned (they are read with memcpy).
// for t < tokens; out is [tokens, hidden]. A null table drops its term;
// type_ids null means type 0 for every token (as BERT without
// token_type_ids). LN runs only when gamma is non-null (beta may be null).
// Throws std::invalid_argument, before writing anything, on an id outside its
// table, a null id array for a present table (type_ids excepted), or bad sizes.
void EmbeddingLayerNorm(const CpuContext& ctx, const EmbeddingTables& tables, const int32_t* ids,
                        const int32_t* position_ids, const int32_t* type_ids, int64_t tokens,
                        const float* gamma, const float* beta, float eps, float* out);

// How position ids count inside each sequence.
enum class PositionIdRule {
  kFromZero,      // 0, 1, 2, ...                       (BERT)
  kAfterPadding,  // padding_idx + 1, padding_idx + 2, ... (RoBERTa, XLM-R)
};

// Fills position_ids[cu_seqlens[b] + i] for every sequence b < batch and
// i < its length. Throws std::invalid_argument on malformed cu_seqlens.
void FillPositionIds(const int32_t* cu_seqlens, int64_t batch, PositionIdRule rule,
                     int32_t padding_idx, int32_t* position_ids);

}  // namespace encoderd::kernels
