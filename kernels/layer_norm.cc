#include "kernels/layer_norm.h"

#include <stdexcept>

#include "kernels/cpu/layer_norm_cpu.h"
#include "kernels/dispatch.h"

namespace encoderd::kernels {

void AddLayerNorm(const Context& ctx, DType dtype, const void* x, const void* residual,
                  const float* gamma, const float* beta, int64_t rows, int64_t hidden, float eps,
                  void* out) {
  AddLayerNorm(ctx, dtype, x, residual, gamma, beta, rows, hidden, eps, out, nullptr);
}

void AddLayerNorm(const Context& ctx, DType dtype, const void* x, const void* residual,
                  const float* gamma, const float* beta, int64_t rows, int64_t hidden, float eps,
                  void* out, void* out_bf16) {
  ctx.CheckActivations("AddLayerNorm", dtype);
  if (out_bf16 != nullptr && ctx.device() != Device::kCpu) {
    throw std::invalid_argument("AddLayerNorm: a bf16 copy of the output is for the CPU only");
  }
  if (rows < 0 || hidden <= 0) throw std::invalid_argument("AddLayerNorm: bad shape");
  if (!(eps >= 0.f)) throw std::invalid_argument("AddLayerNorm: eps must be >= 0");
  if (rows == 0) return;
  if (x == nullptr || (out == nullptr && out_bf16 == nullptr)) {
    throw std::invalid_argument("AddLayerNorm: null tensor");
  }
  if (ctx.device() == Device::kCpu) {
    return AddLayerNormCpu(ctx.cpu(), static_cast<const float*>(x),
                           static_cast<const float*>(residual), gamma, beta, rows, hidden, eps,
                           static_cast<float*>(out), static_cast<uint16_t*>(out_bf16));
  }
  ENCODERD_ON_CUDA("AddLayerNorm", CudaAddLayerNorm(ctx.cuda(), dtype, x, residual, gamma, beta,
                                                    rows, hidden, eps, out));
}

}  // namespace encoderd::kernels
