// Fused residual add + LayerNorm, two-pass (mean, then centred variance)
// statistics in fp32. Rows of up to 1024 elements, a multiple of 8 (every
// encoder's): one warp per row, held in registers, read and written with
// 16-byte accesses. Other rows: one block per row, held in shared memory.
#include <cstdint>
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

// One warp per row of `hidden` <= 256 V elements (a multiple of 8): lane l
// holds the 8-element chunks l, l + 32, ... in registers.
template <typename T, int V>
__global__ void AddLayerNormWarpKernel(const T* x, const T* residual, const float* gamma,
                                       const float* beta, int rows, int hidden, float eps, T* out) {
  const int row =
      static_cast<int>((blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // uniform over the warp
  const size_t base = static_cast<size_t>(row) * hidden;
  float v[V][8];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = (i * 32 + lane) * 8;
    if (c >= hidden) continue;
    uint4 a = *reinterpret_cast<const uint4*>(x + base + c);
    const T* ae = reinterpret_cast<const T*>(&a);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[i][j] = ToFloat(ae[j]);
    if (residual) {
      uint4 r = *reinterpret_cast<const uint4*>(residual + base + c);
      const T* re = reinterpret_cast<const T*>(&r);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[i][j] += ToFloat(re[j]);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) sum += v[i][j];
  }
  // The whole row is in registers: out may alias x or residual.
  float mean = 0.0f, rstd = 1.0f;
  if (gamma) {
    mean = cuda_detail::WarpSum(sum) / hidden;
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if ((i * 32 + lane) * 8 >= hidden) continue;
#pragma unroll
      for (int j = 0; j < 8; ++j) sq += (v[i][j] - mean) * (v[i][j] - mean);
    }
    rstd = rsqrtf(cuda_detail::WarpSum(sq) / hidden + eps);
  }
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = (i * 32 + lane) * 8;
    if (c >= hidden) continue;
    uint4 o;
    T* oe = reinterpret_cast<T*>(&o);
    // gamma and beta are cudaMalloc'ed fp32 rows and c a multiple of 8: two
    // 16-byte loads each instead of eight 4-byte ones.
    float gw[8], bw[8] = {};
    if (gamma) {
      *reinterpret_cast<float4*>(gw) = *reinterpret_cast<const float4*>(gamma + c);
      *reinterpret_cast<float4*>(gw + 4) = *reinterpret_cast<const float4*>(gamma + c + 4);
      if (beta) {
        *reinterpret_cast<float4*>(bw) = *reinterpret_cast<const float4*>(beta + c);
        *reinterpret_cast<float4*>(bw + 4) = *reinterpret_cast<const float4*>(beta + c + 4);
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float y = v[i][j];
      if (gamma) y = (y - mean) * rstd * gw[j] + bw[j];
      oe[j] = FromFloat<T>(y);
    }
    *reinterpret_cast<uint4*>(out + base + c) = o;
  }
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
  if (!gamma) throw std::invalid_argument("CudaAddLayerNorm: null gamma (CUDA needs the weights)");
  if (rows > 0x7fffffff) throw std::invalid_argument("CudaAddLayerNorm: too many rows");
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (hidden % 8 == 0 && hidden <= 1024 && aligned(x) && aligned(out) &&
      (residual == nullptr || aligned(residual)) && (gamma == nullptr || aligned(gamma)) &&
      (beta == nullptr || aligned(beta))) {
    constexpr int kRowsPerBlock = 8;
    const auto blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    const int vectors = static_cast<int>((hidden + 255) / 256);
    ENCODERD_DISPATCH_DTYPE(dtype, T, {
      const auto* xt = static_cast<const T*>(x);
      const auto* rt = static_cast<const T*>(residual);
      auto* ot = static_cast<T*>(out);
      const int r = static_cast<int>(rows), h = static_cast<int>(hidden);
      switch (vectors) {
        case 1:
          AddLayerNormWarpKernel<T, 1>
              <<<blocks, kRowsPerBlock * 32, 0, stream>>>(xt, rt, gamma, beta, r, h, eps, ot);
          break;
        case 2:
          AddLayerNormWarpKernel<T, 2>
              <<<blocks, kRowsPerBlock * 32, 0, stream>>>(xt, rt, gamma, beta, r, h, eps, ot);
          break;
        case 3:
          AddLayerNormWarpKernel<T, 3>
              <<<blocks, kRowsPerBlock * 32, 0, stream>>>(xt, rt, gamma, beta, r, h, eps, ot);
          break;
        default:
          AddLayerNormWarpKernel<T, 4>
              <<<blocks, kRowsPerBlock * 32, 0, stream>>>(xt, rt, gamma, beta, r, h, eps, ot);
          break;
      }
    });
    ENCODERD_CUDA_CHECK_LAUNCH();
    return;
  }
  const size_t smem = (static_cast<size_t>(hidden) + 32) * sizeof(float);
  ENCODERD_DISPATCH_DTYPE(
      dtype, T,
      AddLayerNormKernel<T>
      <<<static_cast<unsigned>(rows), cuda_detail::kNormThreads, smem, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(residual), gamma, beta,
          static_cast<int>(hidden), eps, static_cast<T*>(out)));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

}  // namespace encoderd::kernels
