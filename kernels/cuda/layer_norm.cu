// Fused residual add + LayerNorm: one block per row, the row held in shared
// memory in fp32, two-pass (mean, then centred variance) statistics.
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/layer_norm_row.cuh"

namespace encoderd::kernels {
namespace {

using cuda_detail::FromFloat;
using cuda_detail::ToFloat;

template <typename T>
__global__ void AddLayerNormKernel(const T* x, const T* residual, const float* gamma,
                                   const float* beta, int hidden, float eps, T* out) {
  extern __shared__ float row[];  // [hidden] then 32 floats of reduction scratch
  const size_t base = static_cast<size_t>(blockIdx.x) * hidden;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    float v = ToFloat(x[base + d]);
    if (residual) v += ToFloat(residual[base + d]);
    row[d] = v;
  }
  // Every read of x/residual for this row happens before any write to out,
  // so out may alias either: NormalizeRow synchronises before it writes.
  cuda_detail::NormalizeRow(row, row + hidden, hidden, gamma, beta, eps, out + base);
}

}  // namespace

void CudaAddLayerNorm(CudaContext& ctx, DType dtype, const void* x, const void* residual,
                      const float* gamma, const float* beta, int64_t rows, int64_t hidden,
                      float eps, void* out) {
  if (rows < 0 || hidden <= 0 || hidden > cuda_detail::kMaxNormHidden || eps < 0) {
    throw std::invalid_argument("CudaAddLayerNorm: bad sizes");
  }
  if (rows == 0) return;
  if (!x || !out) throw std::invalid_argument("CudaAddLayerNorm: null x or out");
  if (rows > 0x7fffffff) throw std::invalid_argument("CudaAddLayerNorm: too many rows");
  const size_t smem = (static_cast<size_t>(hidden) + 32) * sizeof(float);
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  ENCODERD_DISPATCH_DTYPE(
      dtype, T,
      AddLayerNormKernel<T>
      <<<static_cast<unsigned>(rows), cuda_detail::kNormThreads, smem, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(residual), gamma, beta,
          static_cast<int>(hidden), eps, static_cast<T*>(out)));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

}  // namespace encoderd::kernels
