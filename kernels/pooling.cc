#include "kernels/pooling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/layer_norm_cpu.h"
#include "kernels/cu_seqlens.h"

namespace encoderd::kernels {

void Pool(const CpuContext& ctx, const float* hidden_states, const int32_t* cu_seqlens,
          int64_t batch, int64_t hidden, Pooling mode, float* out) {
  if (batch < 0 || hidden <= 0) throw std::invalid_argument("Pool: bad shape");
  if (batch == 0) return;
  if (cu_seqlens == nullptr) throw std::invalid_argument("Pool: null cu_seqlens");
  CheckCuSeqlens("Pool", cu_seqlens, batch, cu_seqlens[batch], /*require_nonempty=*/true);
  if (hidden_states == nullptr || out == nullptr) throw std::invalid_argument("Pool: null tensor");
  const int threads =
      int64_t{cu_seqlens[batch]} * hidden >= 2 * kMinParallelElements ? ctx.num_threads() : 1;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t b = 0; b < batch; ++b) {
    const float* first = hidden_states + int64_t{cu_seqlens[b]} * hidden;
    float* dst = out + b * hidden;
    const int64_t len = cu_seqlens[b + 1] - cu_seqlens[b];
    if (mode == Pooling::kCls || mode == Pooling::kLastToken) {
      const float* row = mode == Pooling::kCls ? first : first + (len - 1) * hidden;
      std::memcpy(dst, row, hidden * sizeof(float));
      continue;
    }
    if (mode == Pooling::kMax) {
      std::memcpy(dst, first, hidden * sizeof(float));
      for (int64_t t = 1; t < len; ++t) {
        const float* row = first + t * hidden;
#pragma omp simd
        for (int64_t i = 0; i < hidden; ++i) dst[i] = std::max(dst[i], row[i]);
      }
      continue;
    }
    // Weighted sums: token t weighs t + 1 for kWeightedMean, 1 otherwise.
    const bool by_position = mode == Pooling::kWeightedMean;
    std::fill(dst, dst + hidden, 0.f);
    for (int64_t t = 0; t < len; ++t) {
      const float* row = first + t * hidden;
      const float w = by_position ? static_cast<float>(t + 1) : 1.f;
#pragma omp simd
      for (int64_t i = 0; i < hidden; ++i) dst[i] += w * row[i];
    }
    const double n = static_cast<double>(len);
    const float inv = static_cast<float>(mode == Pooling::kMeanSqrtLen ? 1.0 / std::sqrt(n)
                                         : by_position                 ? 2.0 / (n * (n + 1))
                                                                       : 1.0 / n);
#pragma omp simd
    for (int64_t i = 0; i < hidden; ++i) dst[i] *= inv;
  }
}

void L2NormalizeRows(float* x, int64_t rows, int64_t dim, float eps) {
  if (rows < 0 || dim <= 0) throw std::invalid_argument("L2NormalizeRows: bad shape");
  if (rows > 0 && x == nullptr) throw std::invalid_argument("L2NormalizeRows: null tensor");
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * dim;
    float sq = 0.f;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < dim; ++i) sq += row[i] * row[i];
    const float inv = 1.f / std::max(std::sqrt(sq), eps);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) row[i] *= inv;
  }
}

}  // namespace encoderd::kernels
