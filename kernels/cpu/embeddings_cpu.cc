#include "kernels/cpu/embeddings_cpu.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/layer_norm_cpu.h"
#include "kernels/cpu/parallel.h"

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

void EmbeddingLayerNormCpu(const CpuContext& ctx, const EmbeddingTables& tables, const int32_t* ids,
                           const int32_t* position_ids, const int32_t* type_ids, int64_t tokens,
                           const float* gamma, const float* beta, float eps, float* out) {
  const int64_t h = tables.hidden;
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
  const auto read_row = [h](const void* table, int64_t index, float* dst) {
    std::memcpy(dst, reinterpret_cast<const char*>(table) + index * h * sizeof(float),
                static_cast<size_t>(h) * sizeof(float));
  };
  InParallel(threads, [&](int64_t thread, int64_t nt) {
    std::vector<float> other(static_cast<size_t>(h));
    const Share share = ShareOf(tokens, thread, nt);
    for (int64_t t = share.begin; t < share.end; ++t) {
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
  });
}

}  // namespace encoderd::kernels
