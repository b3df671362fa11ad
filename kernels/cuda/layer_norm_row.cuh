// Internal to kernels/cuda: the LayerNorm of one row held in shared memory,
// shared by the LayerNorm and embedding kernels.
#pragma once

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace encoderd::kernels::cuda_detail {

constexpr int kNormThreads = 256;
// The row plus 32 floats of scratch must fit the 48 KiB of dynamic shared
// memory a launch gets without opting in.
constexpr long kMaxNormHidden = kCudaMaxNormHidden;
static_assert((kMaxNormHidden + 32) * sizeof(float) <= 48 * 1024, "row does not fit");

// row: [hidden] fp32 values in shared memory, written by this block before
// the call; scratch: 32 shared floats. Writes LN(row) * gamma + beta to out
// (gamma null: no LayerNorm at all, the row is stored as is; beta null: 0).
// Synchronises the block before its first write to out.
template <typename T>
__device__ void NormalizeRow(float* row, float* scratch, int hidden, const float* gamma,
                             const float* beta, float eps, T* out) {
  __syncthreads();  // row is complete
  if (gamma == nullptr) {
    for (int d = threadIdx.x; d < hidden; d += blockDim.x) out[d] = FromFloat<T>(row[d]);
    return;
  }
  float sum = 0.0f;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) sum += row[d];
  const float mean = BlockSum(sum, scratch) / hidden;
  float sq = 0.0f;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    const float c = row[d] - mean;
    sq += c * c;
  }
  const float rstd = rsqrtf(BlockSum(sq, scratch) / hidden + eps);
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) {
    const float v = (row[d] - mean) * rstd * gamma[d] + (beta ? beta[d] : 0.0f);
    out[d] = FromFloat<T>(v);
  }
}

}  // namespace encoderd::kernels::cuda_detail
