// Per-sequence pooling (every Pooling mode, as kernels/pooling.cc computes
// it) into fp32: one block per sequence.
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace encoderd::kernels {
namespace {

using cuda_detail::ToFloat;

template <typename T>
__global__ void PoolKernel(const T* hidden_states, const int32_t* cu_seqlens, int hidden,
                           Pooling mode, float* out) {
  const int b = blockIdx.x;
  const int start = cu_seqlens[b], len = cu_seqlens[b + 1] - start;
  const T* x = hidden_states + static_cast<size_t>(start) * hidden;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    float v = 0.0f;
    if (len <= 0) {
    } else if (mode == Pooling::kCls) {
      v = ToFloat(x[d]);
    } else if (mode == Pooling::kLastToken) {
      v = ToFloat(x[static_cast<size_t>(len - 1) * hidden + d]);
    } else if (mode == Pooling::kMax) {
      v = ToFloat(x[d]);
      for (int t = 1; t < len; ++t) v = fmaxf(v, ToFloat(x[static_cast<size_t>(t) * hidden + d]));
    } else {
      const bool by_position = mode == Pooling::kWeightedMean;
      float sum = 0.0f;
      for (int t = 0; t < len; ++t)
        sum += (by_position ? t + 1.0f : 1.0f) * ToFloat(x[static_cast<size_t>(t) * hidden + d]);
      const double n = len;
      v = sum * static_cast<float>(mode == Pooling::kMeanSqrtLen ? 1.0 / sqrt(n)
                                   : by_position                ? 2.0 / (n * (n + 1))
                                                                : 1.0 / n);
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
  ENCODERD_DISPATCH_DTYPE(
      dtype, T,
      PoolKernel<T><<<static_cast<unsigned>(batch), 256, 0, stream>>>(
          static_cast<const T*>(hidden_states), cu_seqlens, static_cast<int>(hidden), mode, out));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

}  // namespace encoderd::kernels
