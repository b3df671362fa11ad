// Per-sequence pooling (first token or mean) into fp32: one block per sequence.
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace encoderd::kernels {
namespace {

using cuda_detail::ToFloat;

template <typename T>
__global__ void PoolKernel(const T* hidden_states, const int32_t* cu_seqlens, int hidden, bool mean,
                           float* out) {
  const int b = blockIdx.x;
  const int start = cu_seqlens[b], len = cu_seqlens[b + 1] - start;
  const T* x = hidden_states + static_cast<size_t>(start) * hidden;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    float v;
    if (mean) {
      float sum = 0.0f;
      for (int t = 0; t < len; ++t) sum += ToFloat(x[static_cast<size_t>(t) * hidden + d]);
      v = len > 0 ? sum / len : 0.0f;
    } else {
      v = len > 0 ? ToFloat(x[d]) : 0.0f;
    }
    out[static_cast<size_t>(b) * hidden + d] = v;
  }
}

}  // namespace

void CudaPool(CudaContext& ctx, DType dtype, const void* hidden_states, const int32_t* cu_seqlens,
              int64_t batch, int64_t hidden, Pooling mode, float* out) {
  if (batch < 0 || batch > 0x7fffffff || hidden <= 0) {
    throw std::invalid_argument("CudaPool: bad sizes");
  }
  if (batch == 0) return;
  if (!hidden_states || !cu_seqlens || !out) throw std::invalid_argument("CudaPool: null pointer");
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  const bool mean = mode == Pooling::kMean;
  ENCODERD_DISPATCH_DTYPE(
      dtype, T,
      PoolKernel<T><<<static_cast<unsigned>(batch), 256, 0, stream>>>(
          static_cast<const T*>(hidden_states), cu_seqlens, static_cast<int>(hidden), mean, out));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

}  // namespace encoderd::kernels
