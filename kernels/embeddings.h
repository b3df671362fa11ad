// Token + position + token-type embeddings, optionally followed by LayerNorm,
// over packed token ids.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/context.h"

namespace encoderd::kernels {

// Row-major embedding tables [rows, hidden] of the activations' dtype, on the
// op's device. position and token_type may be null (the model has no such
// table).
struct EmbeddingTables {
  const void* word = nullptr;
  int64_t word_rows = 0;
  const void* position = nullptr;
  int64_t position_rows = 0;
  const void* token_type = nullptr;
  int64_t token_type_rows = 0;
  int64_t hidden = 0;
};

// out[t, :] = LN(word[ids[t]] + position[position_ids[t]] + token_type[type_ids[t]])
// for t < tokens; out is [tokens, hidden] of `dtype`, the ids int32 and gamma
// and beta fp32 [hidden], all on ctx's device. A null table drops its term;
// type_ids null means type 0 for every token (as BERT without
// token_type_ids). LN runs only when gamma is non-null (beta may be null).
// Throws std::invalid_argument on bad sizes, a null word table, output or id
// array for a present table (type_ids excepted), or a dtype the device's
// activations are not. On the CPU, where the ids are on the host, also on an
// id outside its table, before writing anything; on CUDA the caller checks
// them before uploading. CPU tables need not be aligned (rows are read with
// memcpy).
void EmbeddingLayerNorm(const Context& ctx, DType dtype, const EmbeddingTables& tables,
                        const int32_t* ids, const int32_t* position_ids, const int32_t* type_ids,
                        int64_t tokens, const float* gamma, const float* beta, float eps,
                        void* out);

}  // namespace encoderd::kernels
