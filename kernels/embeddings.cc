#include "kernels/embeddings.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/layer_norm_cpu.h"
#include "kernels/cu_seqlens.h"

namespace encoderd::kernels {
namespace {

void CheckIds(const char* what, const int32_t* ids, int64_t tokens, int64_t rows) {
  if (ids == nullptr) throw std::invalid_argument(std::string("EmbeddingLayerNorm: null ") + what);
  for (int64_t t = 0; t < tokens; ++t) {
    if (ids[t] < 0 || ids[t] >= rows) {
      throw std::invalid_argument(std::string("EmbeddingLayerNorm: ") + what + "[" +
                                  std::to_string(t) + "] = " + std::to_string(ids[t]) +
                                  " outside [0, " + std::to_string(rows) + ")");
    }
  }
}

}  // namespace

void EmbeddingLayerNorm(const CpuContext& ctx, const EmbeddingTables& tables, const int32_t* ids,
                        const int32_t* position_ids, const int32_t* type_ids, int64_t tokens,
                        const float* gamma, const float* beta, float eps, float* out) {
  const int64_t h = tables.hidden;
  if (tokens < 0 || h <= 0) throw std::invalid_argument("EmbeddingLayerNorm: bad shape");
  if (tables.word == nullptr) throw std::invalid_argument("EmbeddingLayerNorm: null word table");
  if (!(eps >= 0.f)) throw std::invalid_argument("EmbeddingLayerNorm: eps must be >= 0");
  if (tokens == 0) return;
  if (out == nullptr) throw std::invalid_argument("EmbeddingLayerNorm: null output");
  CheckIds("ids", ids, tokens, tables.word_rows);
  if (tables.position != nullptr)
    CheckIds("position_ids", position_ids, tokens, tables.position_rows);
  if (tables.token_type != nullptr) {
    if (type_ids != nullptr) {
      CheckIds("type_ids", type_ids, tokens, tables.token_type_rows);
    } else if (tables.token_type_rows < 1) {
      throw std::invalid_argument("EmbeddingLayerNorm: empty token type table");
    }
  }
  const int threads = tokens * h >= 2 * kMinParallelElements ? ctx.num_threads() : 1;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = out + t * h;
    const float* word = tables.word + int64_t{ids[t]} * h;
    const float* pos = tables.position ? tables.position + int64_t{position_ids[t]} * h : nullptr;
    const float* type =
        tables.token_type ? tables.token_type + int64_t{type_ids ? type_ids[t] : 0} * h : nullptr;
    if (pos != nullptr && type != nullptr) {
#pragma omp simd
      for (int64_t i = 0; i < h; ++i) row[i] = word[i] + pos[i] + type[i];
    } else if (pos != nullptr || type != nullptr) {
      const float* other = pos != nullptr ? pos : type;
#pragma omp simd
      for (int64_t i = 0; i < h; ++i) row[i] = word[i] + other[i];
    } else {
#pragma omp simd
      for (int64_t i = 0; i < h; ++i) row[i] = word[i];
    }
    if (gamma != nullptr) AddLayerNormRow(row, nullptr, gamma, beta, h, eps, row);
  }
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
