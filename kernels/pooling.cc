#include "kernels/pooling.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cpu/pooling_cpu.h"
#include "kernels/cu_seqlens.h"
#include "kernels/dispatch.h"

namespace encoderd::kernels {

void Pool(const Context& ctx, DType dtype, const void* hidden_states, const int32_t* cu_seqlens,
          const int32_t* pool_start, int64_t batch, int64_t hidden, Pooling mode, float* out) {
  ctx.CheckActivations("Pool", dtype);
  if (batch < 0 || hidden <= 0) throw std::invalid_argument("Pool: bad shape");
  if (batch == 0) return;
  if (cu_seqlens == nullptr) throw std::invalid_argument("Pool: null cu_seqlens");
  if (hidden_states == nullptr || out == nullptr) throw std::invalid_argument("Pool: null tensor");
  if (ctx.device() == Device::kCpu) {
    CheckCuSeqlens("Pool", cu_seqlens, batch, cu_seqlens[batch], /*require_nonempty=*/true);
    return PoolCpu(ctx.cpu(), static_cast<const float*>(hidden_states), cu_seqlens, pool_start,
                   batch, hidden, mode, out);
  }
  ENCODERD_ON_CUDA("Pool", CudaPool(ctx.cuda(), dtype, hidden_states, cu_seqlens, pool_start, batch,
                                    hidden, mode, out));
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
