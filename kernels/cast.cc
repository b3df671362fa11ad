#include "kernels/cast.h"

#include <cstring>
#include <stdexcept>

#include "kernels/dispatch.h"

namespace encoderd::kernels {

void CastToFloat(const Context& ctx, DType dtype, const void* in, int64_t n, float* out) {
  ctx.CheckActivations("CastToFloat", dtype);
  if (n < 0) throw std::invalid_argument("CastToFloat: negative size");
  if (n == 0) return;
  if (in == nullptr || out == nullptr) throw std::invalid_argument("CastToFloat: null tensor");
  if (ctx.device() == Device::kCpu) {  // float32 already
    if (in != out) std::memmove(out, in, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  ENCODERD_ON_CUDA("CastToFloat", CudaCastToFloat(ctx.cuda(), dtype, in, n, out));
}

}  // namespace encoderd::kernels
