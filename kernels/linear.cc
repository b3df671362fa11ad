#include "kernels/linear.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/linear_cpu.h"
#include "kernels/dispatch.h"

namespace encoderd::kernels {

PackedWeight::PackedWeight(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PackedWeight::~PackedWeight() = default;

std::unique_ptr<PackedWeight> PackedWeight::Pack(const Context& ctx, const float* weight,
                                                 const float* bias, int64_t out_features,
                                                 int64_t in_features, DType type) {
  if (weight == nullptr) throw std::invalid_argument("PackedWeight::Pack: null weight");
  const bool cpu = ctx.device() == Device::kCpu;
  const bool supported =
      cpu ? type == DType::kFloat32 || type == DType::kBFloat16 || type == DType::kInt8
          : type == DType::kFloat16 || type == DType::kBFloat16;
  if (!supported) {
    throw std::invalid_argument(std::string("PackedWeight::Pack: weights on ") +
                                DeviceName(ctx.device()) + " are " +
                                (cpu ? "float32, bfloat16 or int8" : "float16 or bfloat16") +
                                ", not " + std::string(DTypeName(type)));
  }
  if (out_features <= 0 || in_features <= 0) {
    throw std::invalid_argument("PackedWeight::Pack: bad shape [" + std::to_string(out_features) +
                                ", " + std::to_string(in_features) + "]");
  }
  std::unique_ptr<Impl> impl;
  if (cpu) {
    impl = PackWeightCpu(ctx.cpu(), weight, bias, out_features, in_features, type);
  } else {
    ENCODERD_ON_CUDA("PackedWeight::Pack", impl = PackWeightCuda(ctx.cuda(), weight, bias,
                                                                 out_features, in_features, type));
  }
  impl->device = ctx.device();
  impl->out_features = out_features;
  impl->in_features = in_features;
  impl->type = type;
  return std::unique_ptr<PackedWeight>(new PackedWeight(std::move(impl)));
}

Device PackedWeight::device() const { return impl_->device; }
int64_t PackedWeight::out_features() const { return impl_->out_features; }
int64_t PackedWeight::in_features() const { return impl_->in_features; }
DType PackedWeight::type() const { return impl_->type; }
size_t PackedWeight::bytes() const { return impl_->bytes(); }

void Linear(const Context& ctx, DType dtype, const void* x, int64_t rows,
            const PackedWeight& weight, Epilogue epilogue, const void* residual, void* y) {
  ctx.CheckActivations("Linear", dtype);
  if (weight.device() != ctx.device()) {
    throw std::invalid_argument(std::string("Linear: a weight packed for ") +
                                DeviceName(weight.device()) + " run on " +
                                DeviceName(ctx.device()));
  }
  if (ctx.device() == Device::kCuda && weight.type() != dtype) {
    throw std::invalid_argument("Linear: " + std::string(DTypeName(weight.type())) +
                                " weights with " + std::string(DTypeName(dtype)) + " activations");
  }
  if (rows < 0) throw std::invalid_argument("Linear: negative row count");
  if (rows == 0) return;
  if (x == nullptr || y == nullptr) throw std::invalid_argument("Linear: null input or output");
  if (epilogue == Epilogue::kResidual && residual == nullptr) {
    throw std::invalid_argument("Linear: residual epilogue without a residual tensor");
  }
  if (x == y) throw std::invalid_argument("Linear: input aliases output");
  if (ctx.device() == Device::kCpu) {
    return LinearCpu(ctx.cpu(), static_cast<const float*>(x), rows, weight, epilogue,
                     static_cast<const float*>(residual), static_cast<float*>(y));
  }
  ENCODERD_ON_CUDA("Linear", LinearCuda(ctx.cuda(), dtype, x, rows, weight, epilogue, residual, y));
}

}  // namespace encoderd::kernels
