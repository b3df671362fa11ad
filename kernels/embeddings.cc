#include "kernels/embeddings.h"

#include <stdexcept>

#include "kernels/cpu/embeddings_cpu.h"
#include "kernels/dispatch.h"

namespace encoderd::kernels {
void EmbeddingLayerNorm(const Context& ctx, DType dtype, const EmbeddingTables& tables,
                        const int32_t* ids, const int32_t* position_ids, const int32_t* type_ids,
                        int64_t tokens, const float* gamma, const float* beta, float eps,
                        void* out) {
  ctx.CheckActivations("EmbeddingLayerNorm", dtype);
  if (tokens < 0 || tables.hidden <= 0)
    throw std::invalid_argument("EmbeddingLayerNorm: bad shape");
  if (tables.word == nullptr) throw std::invalid_argument("EmbeddingLayerNorm: null word table");
  if (!(eps >= 0.f)) throw std::invalid_argument("EmbeddingLayerNorm: eps must be >= 0");
  if (tokens == 0) return;
  if (out == nullptr) throw std::invalid_argument("EmbeddingLayerNorm: null output");
  if (ids == nullptr || (tables.position != nullptr && position_ids == nullptr)) {
    throw std::invalid_argument("EmbeddingLayerNorm: null ids");
  }
  if (ctx.device() == Device::kCpu) {
    return EmbeddingLayerNormCpu(ctx.cpu(), tables, ids, position_ids, type_ids, tokens, gamma,
                                 beta, eps, static_cast<float*>(out));
  }
  ENCODERD_ON_CUDA("EmbeddingLayerNorm",
                   CudaEmbeddingLayerNorm(ctx.cuda(), dtype, tables, ids, position_ids, type_ids,
                                          tokens, gamma, beta, eps, out));
}

}  // namespace encoderd::kernels
