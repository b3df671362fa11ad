#include "kernels/layer_norm.h"

#include <stdexcept>

#include "kernels/cpu/layer_norm_cpu.h"

namespace encoderd::kernels {

void AddLayerNorm(const CpuContext& ctx, const float* x, const float* residual, const float* gamma,
                  const float* beta, int64_t rows, int64_t hidden, float eps, float* out) {
  if (rows < 0 || hidden <= 0) throw std::invalid_argument("AddLayerNorm: bad shape");
  if (!(eps >= 0.f)) throw std::invalid_argument("AddLayerNorm: eps must be >= 0");
  if (rows == 0) return;
  if (x == nullptr || out == nullptr) throw std::invalid_argument("AddLayerNorm: null tensor");
  const int threads = rows * hidden >= 2 * kMinParallelElements ? ctx.num_threads() : 1;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    AddLayerNormRow(x + r * hidden, residual ? residual + r * hidden : nullptr, gamma, beta, hidden,
                    eps, out + r * hidden);
  }
}

}  // namespace encoderd::kernels
