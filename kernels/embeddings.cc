#include "kernels/embeddings.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

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
  // The tables may sit at any byte address (a legacy checkpoint's storages
  // are used where the file maps them), so rows are read with memcpy.
  const auto read_row = [h](const float* table, int64_t index, float* dst) {
    std::memcpy(dst, reinterpret_cast<const char*>(table) + index * h * sizeof(float),
                static_cast<size_t>(h) * sizeof(float));
  };
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> other(static_cast<size_t>(h));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      float* row = out + t * h;
      read_row(tables.word, ids[t], row);
      if (tables.position != nullptr) {
        read_row(tables.position, position_ids[t], other.data());
#pragma omp simd
        for (int64_t i = 0; i < h; ++i) row[i] += other[i];
      }
      if (tables.token_type != nullptr) {
        read_row(tables.token_type, type_ids ? type_ids[t] : 0, other.data());
#pragma omp simd
        for (int64_t i = 0; i < h; ++i) row[i] += other[i];
      }
      if (gamma != nullptr) AddLayerNormRow(row, nullptr, gamma, beta, h, eps, row);
    }
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
