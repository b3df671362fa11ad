// Embedding gather + sum + LayerNorm: one block per token.
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/layer_norm_row.cuh"

namespace encoderd::kernels {
namespace {

using cuda_detail::ToFloat;

template <typename T>
__global__ void EmbeddingKernel(const T* word, const T* position, const T* token_type,
                                const int32_t* ids, const int32_t* position_ids,
                                const int32_t* type_ids, int hidden, const float* gamma,
                                const float* beta, float eps, T* out) {
  extern __shared__ float row[];
  const size_t t = blockIdx.x;
  const T* w = word + static_cast<size_t>(ids[t]) * hidden;
  const T* p = position ? position + static_cast<size_t>(position_ids[t]) * hidden : nullptr;
  const T* y =
      token_type ? token_type + static_cast<size_t>(type_ids ? type_ids[t] : 0) * hidden : nullptr;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    float v = ToFloat(w[d]);
    if (p) v += ToFloat(p[d]);
    if (y) v += ToFloat(y[d]);
    row[d] = v;
  }
  cuda_detail::NormalizeRow(row, row + hidden, hidden, gamma, beta, eps, out + t * hidden);
}

}  // namespace

void CudaEmbeddingLayerNorm(CudaContext& ctx, DType dtype, const EmbeddingTables& tables,
                            const int32_t* ids, const int32_t* position_ids,
                            const int32_t* type_ids, int64_t tokens, const float* gamma,
                            const float* beta, float eps, void* out) {
  if (tokens < 0 || tables.hidden <= 0 || tables.hidden > cuda_detail::kMaxNormHidden ||
      tokens > 0x7fffffff || eps < 0) {
    throw std::invalid_argument("CudaEmbeddingLayerNorm: bad sizes");
  }
  if (tokens == 0) return;
  if (!tables.word || !ids || !out || (tables.position && !position_ids)) {
    throw std::invalid_argument("CudaEmbeddingLayerNorm: missing pointer");
  }
  const size_t smem = (static_cast<size_t>(tables.hidden) + 32) * sizeof(float);
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  ENCODERD_DISPATCH_DTYPE(
      dtype, T,
      EmbeddingKernel<T>
      <<<static_cast<unsigned>(tokens), cuda_detail::kNormThreads, smem, stream>>>(
          static_cast<const T*>(tables.word), static_cast<const T*>(tables.position),
          static_cast<const T*>(tables.token_type), ids, position_ids, type_ids,
          static_cast<int>(tables.hidden), gamma, beta, eps, static_cast<T*>(out)));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

}  // namespace encoderd::kernels
