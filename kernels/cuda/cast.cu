// fp32 <-> fp16/bf16 conversions and weight upload.
#include <algorithm>
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_math.cuh"

namespace encoderd::kernels {
namespace {

template <typename From, typename To>
__global__ void CastKernel(const From* in, int64_t n, To* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    out[i] = cuda_detail::FromFloat<To>(cuda_detail::ToFloat(in[i]));
  }
}

unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535));
}

}  // namespace

void CudaCastFromFloat(CudaContext& ctx, DType dtype, const float* in, int64_t n, void* out) {
  if (n < 0) throw std::invalid_argument("CudaCastFromFloat: negative size");
  if (n == 0) return;
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  ENCODERD_DISPATCH_DTYPE(
      dtype, T, CastKernel<float, T><<<Blocks(n), 256, 0, stream>>>(in, n, static_cast<T*>(out)));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

void CudaCastToFloat(CudaContext& ctx, DType dtype, const void* in, int64_t n, float* out) {
  if (n < 0) throw std::invalid_argument("CudaCastToFloat: negative size");
  if (n == 0) return;
  auto stream = static_cast<cudaStream_t>(ctx.stream());
  ENCODERD_DISPATCH_DTYPE(dtype, T,
                          CastKernel<T, float>
                          <<<Blocks(n), 256, 0, stream>>>(static_cast<const T*>(in), n, out));
  ENCODERD_CUDA_CHECK_LAUNCH();
}

void CudaUploadAs(CudaContext& ctx, DType dtype, const float* host, int64_t n, void* out) {
  if (n < 0) throw std::invalid_argument("CudaUploadAs: negative size");
  if (n == 0) return;
  DeviceBuffer staging(&ctx, static_cast<size_t>(n) * sizeof(float));
  // A pageable source: cudaMemcpyAsync returns once `host` has been read.
  ctx.CopyToDevice(staging.get(), host, static_cast<size_t>(n) * sizeof(float));
  CudaCastFromFloat(ctx, dtype, staging.as<float>(), n, out);
  // The staging block goes back to the cache; stream order protects it.
}

}  // namespace encoderd::kernels
