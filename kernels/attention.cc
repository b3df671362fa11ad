#include "kernels/attention.h"

#include <stdexcept>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cu_seqlens.h"

namespace encoderd::kernels {

void Attention(const CpuContext& ctx, const float* qkv, const int32_t* cu_seqlens, int64_t batch,
               int64_t total_tokens, int64_t heads, int64_t head_dim, float scale, float* out) {
  if (heads <= 0 || head_dim <= 0) throw std::invalid_argument("Attention: bad head shape");
  CheckCuSeqlens("Attention", cu_seqlens, batch, total_tokens);
  if (total_tokens == 0) return;
  if (qkv == nullptr || out == nullptr) throw std::invalid_argument("Attention: null tensor");
  AttentionCpu(ctx, qkv, cu_seqlens, batch, heads, head_dim, scale, out);
}

}  // namespace encoderd::kernels
