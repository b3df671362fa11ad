// The CPU embedding op (kernels/embeddings.h; sizes and pointers already
// validated, ids checked against their tables here): fp32 tables read at any
// byte address, fp32 output.
#pragma once

#include <cstdint>

#include "kernels/cpu_context.h"
#include "kernels/embeddings.h"

namespace encoderd::kernels {

void EmbeddingLayerNormCpu(const CpuContext& ctx, const EmbeddingTables& tables, const int32_t* ids,
                           const int32_t* position_ids, const int32_t* type_ids, int64_t tokens,
                           const float* gamma, const float* beta, float eps, float* out);

}  // namespace encoderd::kernels
