// Internal to kernels/cuda: element conversions and block reductions shared
// by the .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "core/dtype.h"

namespace encoderd::kernels::cuda_detail {

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `scratch` holds 32 floats of shared memory; the
// call synchronises the block and may be called repeatedly with the same scratch.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

}  // namespace encoderd::kernels::cuda_detail

// Instantiates a launcher body for fp16 or bf16 from a runtime DType; any
// other dtype throws std::invalid_argument.
#define ENCODERD_DISPATCH_DTYPE(dtype, T, ...)                                               \
  do {                                                                                       \
    if ((dtype) == DType::kBFloat16) {                                                       \
      using T = __nv_bfloat16;                                                               \
      __VA_ARGS__;                                                                           \
    } else if ((dtype) == DType::kFloat16) {                                                 \
      using T = __half;                                                                      \
      __VA_ARGS__;                                                                           \
    } else {                                                                                 \
      throw std::invalid_argument(std::string("CUDA ops run in float16 or bfloat16, not ") + \
                                  std::string(DTypeName(dtype)));                            \
    }                                                                                        \
  } while (0)
