#include "kernels/attention.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cu_seqlens.h"
#include "kernels/dispatch.h"

namespace encoderd::kernels {

bool AttentionTakesBf16Values(const Context& ctx, int64_t head_dim) {
  return ctx.device() == Device::kCpu && AttentionCpuTakesBf16Values(head_dim);
}

void Attention(const Context& ctx, DType dtype, DType matmul_dtype, const void* qkv,
               const int32_t* cu_seqlens, int64_t batch, int64_t total_tokens, int32_t max_seqlen,
               int64_t heads, int64_t head_dim, float scale, void* out, const RelativeBias* bias,
               const DisentangledBias* disentangled, const KeyBias* key_bias) {
  const bool cpu = ctx.device() == Device::kCpu;
  // The CPU also takes bf16 values, with bf16 matmuls.
  const bool cpu_bf16 = cpu && dtype == DType::kBFloat16 && matmul_dtype == DType::kBFloat16;
  if (!cpu_bf16) ctx.CheckActivations("Attention", dtype);
  if (matmul_dtype != dtype && !(cpu && matmul_dtype == DType::kBFloat16)) {
    throw std::invalid_argument("Attention: " + std::string(DTypeName(matmul_dtype)) +
                                " matmuls over " + std::string(DTypeName(dtype)) +
                                " activations do not run on " + DeviceName(ctx.device()));
  }
  if (heads <= 0 || head_dim <= 0) throw std::invalid_argument("Attention: bad head shape");
  if (batch < 0 || total_tokens < 0) throw std::invalid_argument("Attention: negative size");
  if (cpu) CheckCuSeqlens("Attention", cu_seqlens, batch, total_tokens);
  if (bias != nullptr) {
    if (!cpu)
      throw std::invalid_argument("Attention: a relative position bias does not run on " +
                                  std::string(DeviceName(ctx.device())));
    if (bias->values == nullptr || bias->center < 0) {
      throw std::invalid_argument("Attention: malformed relative position bias");
    }
    for (int64_t b = 0; b < batch; ++b) {
      if (cu_seqlens[b + 1] - cu_seqlens[b] > bias->center + 1) {
        throw std::invalid_argument("Attention: a sequence of " +
                                    std::to_string(cu_seqlens[b + 1] - cu_seqlens[b]) +
                                    " tokens is longer than the relative position bias covers (" +
                                    std::to_string(bias->center + 1) + ")");
      }
    }
  }
  if (disentangled != nullptr) {
    if (!cpu)
      throw std::invalid_argument("Attention: disentangled attention does not run on " +
                                  std::string(DeviceName(ctx.device())));
    if (bias != nullptr)
      throw std::invalid_argument("Attention: a relative position bias beside disentangled terms");
    const DisentangledBias& d = *disentangled;
    if (d.key == nullptr || d.query == nullptr || d.index == nullptr || d.columns <= 0 ||
        d.center < 0) {
      throw std::invalid_argument("Attention: malformed disentangled attention tables");
    }
    for (int64_t b = 0; b < batch; ++b) {
      if (cu_seqlens[b + 1] - cu_seqlens[b] > d.center + 1) {
        throw std::invalid_argument("Attention: a sequence of " +
                                    std::to_string(cu_seqlens[b + 1] - cu_seqlens[b]) +
                                    " tokens is longer than the disentangled attention covers (" +
                                    std::to_string(d.center + 1) + ")");
      }
    }
  }
  if (key_bias != nullptr) {
    if (!cpu)
      throw std::invalid_argument("Attention: masked keys do not run on " +
                                  std::string(DeviceName(ctx.device())));
    if (bias != nullptr || disentangled != nullptr)
      throw std::invalid_argument("Attention: masked keys beside a position bias");
    if (key_bias->values == nullptr && total_tokens > 0)
      throw std::invalid_argument("Attention: malformed key bias");
  }
  if (total_tokens == 0) return;
  if (qkv == nullptr || out == nullptr || cu_seqlens == nullptr) {
    throw std::invalid_argument("Attention: null tensor");
  }
  if (cpu) {
    return AttentionCpu(ctx.cpu(), dtype, qkv, cu_seqlens, batch, heads, head_dim, scale,
                        matmul_dtype == DType::kBFloat16, out, bias, disentangled, key_bias);
  }
  ENCODERD_ON_CUDA("Attention", CudaAttention(ctx.cuda(), dtype, qkv, cu_seqlens, batch, max_seqlen,
                                              heads, head_dim, scale, out));
}

}  // namespace encoderd::kernels
