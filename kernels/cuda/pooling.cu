// Per-sequence pooling (every Pooling mode, as kernels/pooling.cc computes
// it) into fp32. A block owns 32 consecutive dimensions of one sequence:
// its 8 warps take every 8th token (a warp reads 32 neighbouring elements of
// a row), keep a partial sum or max in a register, and combine them in
// shared memory. A batch of 256 BERT-base sequences makes 6,144 blocks, so
// the reads of long sequences are spread over the whole GPU.
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace encoderd::kernels {
namespace {

using cuda_detail::ToFloat;

constexpr int kDims = 32;  // dimensions per block (threadIdx.x)
constexpr int kLanes = 8;  // tokens read at once (threadIdx.y)

template <typename T>
__global__ void PoolKernel(const T* hidden_states, const int32_t* cu_seqlens,
                           const int32_t* pool_start, int hidden, Pooling mode, float* out) {
  const int b = blockIdx.x;
  const int d = blockIdx.y * kDims + threadIdx.x;
  const int lane = threadIdx.y;
  const int start = cu_seqlens[b], len = cu_seqlens[b + 1] - start;
  const T* x = hidden_states + static_cast<size_t>(start) * hidden;
  const bool is_max = mode == Pooling::kMax;
  const bool by_position = mode == Pooling::kWeightedMean;
  __shared__ float part[kLanes][kDims];
  if (mode == Pooling::kCls || mode == Pooling::kLastToken) {
    if (lane == 0 && d < hidden) {
      const int t = mode == Pooling::kCls ? 0 : len - 1;
      out[static_cast<size_t>(b) * hidden + d] =
          len > 0 ? ToFloat(x[static_cast<size_t>(t) * hidden + d]) : 0.0f;
    }
    return;  // uniform over the block: no barrier follows for these modes
  }
  // The reducing modes read tokens [first, len) (kernels::Pool's pool_start).
  const int first = pool_start && len > 0 ? min(max(pool_start[b], 0), len - 1) : 0;
  float acc = is_max ? -INFINITY : 0.0f;
  if (d < hidden) {
    for (int t = first + lane; t < len; t += kLanes) {
      const float v = ToFloat(x[static_cast<size_t>(t) * hidden + d]);
      acc = is_max ? fmaxf(acc, v) : acc + (by_position ? t + 1.0f : 1.0f) * v;
    }
  }
  part[lane][threadIdx.x] = acc;
  __syncthreads();
  if (lane != 0 || d >= hidden) return;
  float v = part[0][threadIdx.x];
  for (int i = 1; i < kLanes; ++i) {
    v = is_max ? fmaxf(v, part[i][threadIdx.x]) : v + part[i][threadIdx.x];
  }
  if (len <= 0) {
    v = 0.0f;
  } else if (!is_max) {
    const double n = len - first;
    const double weights =
        0.5 * (static_cast<double>(len) * (len + 1) - static_cast<double>(first) * (first + 1));
    v *= static_cast<float>(mode == Pooling::kMeanSqrtLen ? 1.0 / sqrt(n)
                            : by_position                 ? 1.0 / weights
                                                          : 1.0 / n);
  }
  out[static_cast<size_t>(b) * hidden + d] = v;
}

}  // namespace

void CudaPool(CudaContext& ctx, DType dtype, const void* hidden_states, const int32_t* cu_seqlens,
              const int32_t* pool_start, int64_t batch, int64_t hidden, Pooling mode, float* out) {
  if (batch < 0 || batch > 0x7fffffff || hidden <= 0) {
    throw std::invalid_argument("CudaPool: bad sizes");
  }
  if (batch == 0) return;
  if (!hidden_states || !cu_seqlens || !out) throw std::invalid_argument("CudaPool: null pointer");
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  ENCODERD_DISPATCH_DTYPE(
      dtype, T,
      PoolKernel<T>
      <<<dim3(static_cast<unsigned>(batch), static_cast<unsigned>((hidden + kDims - 1) / kDims)),
         dim3(kDims, kLanes), 0, stream>>>(static_cast<const T*>(hidden_states), cu_seqlens,
                                           pool_start, static_cast<int>(hidden), mode, out));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

}  // namespace encoderd::kernels
