#include "kernels/embeddings.h"

#include <stdexcept>

#include "kernels/cpu/embeddings_cpu.h"
#include "kernels/cu_seqlens.h"
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

void FillPositionIds(const int32_t* cu_seqlens, int64_t batch, PositionIdRule rule,
                     int32_t padding_idx, int32_t* position_ids) {
  if (batch < 0 || cu_seqlens == nullptr) throw std::invalid_argument("FillPositionIds: bad batch");
  CheckCuSeqlens("FillPositionIds", cu_seqlens, batch, cu_seqlens[batch]);
  if (cu_seqlens[batch] > 0 && position_ids == nullptr) {
    throw std::invalid_argument("FillPositionIds: null position_ids");
  }
  const int32_t first = rule == PositionIdRule::kFromZero ? 0 : padding_idx + 1;
  for (int64_t b = 0; b < batch; ++b) {
    for (int32_t t = cu_seqlens[b]; t < cu_seqlens[b + 1]; ++t) {
      position_ids[t] = first + (t - cu_seqlens[b]);
    }
  }
}

}  // namespace encoderd::kernels
