// Helpers shared by the CUDA tests: skip without a GPU, move data between the
// host (fp32) and the device (fp16/bf16).
#pragma once

#if ENCODERD_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_ops.h"

namespace encoderd::cuda_test {

// Skips the calling test when the CUDA runtime sees no device.
#define ENCODERD_SKIP_WITHOUT_GPU()                                           \
  do {                                                                        \
    std::string encoderd_reason_;                                             \
    if (::encoderd::kernels::CudaDeviceCount(&encoderd_reason_) == 0) {       \
      GTEST_SKIP() << "no CUDA device visible (" << encoderd_reason_          \
                   << "): CUDA test skipped; run it on a machine with a GPU"; \
    }                                                                         \
  } while (0)

inline std::vector<float> Random(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline kernels::DeviceBuffer Upload(kernels::CudaContext& ctx, DType dtype,
                                    const std::vector<float>& host) {
  kernels::DeviceBuffer buf(&ctx, host.size() * 2);
  kernels::CudaUploadAs(ctx, dtype, host.data(), static_cast<int64_t>(host.size()), buf.get());
  return buf;
}

inline kernels::DeviceBuffer UploadRaw(kernels::CudaContext& ctx, const void* host, size_t bytes) {
  kernels::DeviceBuffer buf(&ctx, bytes);
  ctx.CopyToDevice(buf.get(), host, bytes);
  ctx.Synchronize();
  return buf;
}

// n elements of `dtype` at `device`, as fp32 on the host.
inline std::vector<float> Download(kernels::CudaContext& ctx, DType dtype, const void* device,
                                   size_t n) {
  kernels::DeviceBuffer f(&ctx, n * sizeof(float));
  kernels::CudaCastToFloat(ctx, dtype, device, static_cast<int64_t>(n), f.as<float>());
  std::vector<float> host(n);
  ctx.CopyToHost(host.data(), f.get(), n * sizeof(float));
  ctx.Synchronize();
  return host;
}

// `host` rounded to `dtype` (through the device), so that the CPU reference
// sees exactly the inputs the GPU sees.
inline std::vector<float> Rounded(kernels::CudaContext& ctx, DType dtype,
                                  const std::vector<float>& host) {
  auto buf = Upload(ctx, dtype, host);
  return Download(ctx, dtype, buf.get(), host.size());
}

// Tolerance of one output element: absolute plus relative to the reference.
inline float Tolerance(DType dtype, float ref) {
  const float eps = dtype == DType::kBFloat16 ? 1.6e-2f : 2e-3f;
  return eps * (1.0f + std::abs(ref));
}

inline const char* Name(DType dtype) { return dtype == DType::kBFloat16 ? "bf16" : "fp16"; }

}  // namespace encoderd::cuda_test

#endif  // ENCODERD_WITH_CUDA
