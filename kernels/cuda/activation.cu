// Element-wise activations that cuBLASLt's epilogues do not offer exactly.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace encoderd::kernels {
namespace {

// gelu(x) = x / 2 * (1 + erf(x / sqrt(2))), in fp32.
__device__ __forceinline__ float Gelu(float v) {
  return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

// Eight elements (16 bytes) per thread and step: the kernel streams the FFN's
// intermediate activations once, at the memory's rate.
// Where x is not 16-byte aligned, everything goes through the scalar loop.
template <typename T>
__global__ void GeluKernel(T* x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t vectors = reinterpret_cast<uintptr_t>(x) % 16 == 0 ? n / 8 : 0;
  auto* v = reinterpret_cast<uint4*>(x);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vectors;
       i += stride) {
    uint4 chunk = v[i];
    T* e = reinterpret_cast<T*>(&chunk);
#pragma unroll
    for (int j = 0; j < 8; ++j) e[j] = cuda_detail::FromFloat<T>(Gelu(cuda_detail::ToFloat(e[j])));
    v[i] = chunk;
  }
  for (int64_t i = vectors * 8 + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    x[i] = cuda_detail::FromFloat<T>(Gelu(cuda_detail::ToFloat(x[i])));
  }
}

}  // namespace

void CudaGeluInPlace(CudaContext& ctx, DType dtype, void* x, int64_t n) {
  if (n < 0) throw std::invalid_argument("CudaGeluInPlace: negative size");
  if (n == 0) return;
  if (x == nullptr) throw std::invalid_argument("CudaGeluInPlace: null pointer");
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n / 8 + 255) / 256 + 1, 132 * 16));
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  ENCODERD_DISPATCH_DTYPE(dtype, T,
                          GeluKernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(x), n));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

}  // namespace encoderd::kernels
