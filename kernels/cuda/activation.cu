// Element-wise activations that cuBLASLt's epilogues do not offer exactly.
#include <algorithm>
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace encoderd::kernels {
namespace {

// gelu(x) = x / 2 * (1 + erf(x / sqrt(2))), in fp32.
template <typename T>
__global__ void GeluKernel(T* x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const float v = cuda_detail::ToFloat(x[i]);
    x[i] = cuda_detail::FromFloat<T>(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
  }
}

}  // namespace

void CudaGeluInPlace(CudaContext& ctx, DType dtype, void* x, int64_t n) {
  if (n < 0) throw std::invalid_argument("CudaGeluInPlace: negative size");
  if (n == 0) return;
  if (x == nullptr) throw std::invalid_argument("CudaGeluInPlace: null pointer");
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535));
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  ENCODERD_DISPATCH_DTYPE(dtype, T,
                          GeluKernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(x), n));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

}  // namespace encoderd::kernels
