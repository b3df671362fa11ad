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
bool PackedWeight::bf16_values() const { return impl_->bf16_values(); }

namespace {

// Linear's and FeedForward's checks of one weight against ctx and dtype.
void CheckWeight(const char* op, const Context& ctx, DType dtype, const PackedWeight& weight) {
  if (weight.device() != ctx.device()) {
    throw std::invalid_argument(std::string(op) + ": a weight packed for " +
                                DeviceName(weight.device()) + " run on " +
                                DeviceName(ctx.device()));
  }
  if (ctx.device() == Device::kCuda && weight.type() != dtype) {
    throw std::invalid_argument(std::string(op) + ": " + std::string(DTypeName(weight.type())) +
                                " weights with " + std::string(DTypeName(dtype)) + " activations");
  }
}

// Whether (x_dtype, y_dtype) is a pairing Linear takes besides one
// activation dtype for both: bf16 on the CPU with a bf16 weight (y not
// with a residual).
bool CpuBf16Pairing(const Context& ctx, DType x_dtype, DType y_dtype, const PackedWeight& weight,
                    Epilogue epilogue) {
  const auto ok = [](DType t) { return t == DType::kFloat32 || t == DType::kBFloat16; };
  return ctx.device() == Device::kCpu && weight.type() == DType::kBFloat16 && ok(x_dtype) &&
         ok(y_dtype) && !(y_dtype == DType::kBFloat16 && epilogue == Epilogue::kResidual);
}

}  // namespace

void Linear(const Context& ctx, DType dtype, const void* x, int64_t rows,
            const PackedWeight& weight, Epilogue epilogue, const void* residual, void* y) {
  Linear(ctx, dtype, x, rows, weight, epilogue, residual, dtype, y);
}

void Linear(const Context& ctx, DType x_dtype, const void* x, int64_t rows,
            const PackedWeight& weight, Epilogue epilogue, const void* residual, DType y_dtype,
            void* y) {
  const bool cpu = ctx.device() == Device::kCpu;
  if (x_dtype == y_dtype && (x_dtype != DType::kBFloat16 || !cpu)) {
    ctx.CheckActivations("Linear", x_dtype);
  } else if (!CpuBf16Pairing(ctx, x_dtype, y_dtype, weight, epilogue)) {
    throw std::invalid_argument("Linear: " + std::string(DTypeName(x_dtype)) + " input, " +
                                std::string(DTypeName(y_dtype)) + " output and " +
                                std::string(DTypeName(weight.type())) + " weights do not run on " +
                                DeviceName(ctx.device()) +
                                (epilogue == Epilogue::kResidual ? " with a residual" : ""));
  }
  CheckWeight("Linear", ctx, x_dtype, weight);
  if (rows < 0) throw std::invalid_argument("Linear: negative row count");
  if (rows == 0) return;
  if (x == nullptr || y == nullptr) throw std::invalid_argument("Linear: null input or output");
  if (epilogue == Epilogue::kResidual && residual == nullptr) {
    throw std::invalid_argument("Linear: residual epilogue without a residual tensor");
  }
  if (x == y) throw std::invalid_argument("Linear: input aliases output");
  if (cpu) {
    return LinearCpu(ctx.cpu(), x_dtype, x, rows, weight, epilogue,
                     static_cast<const float*>(residual), y_dtype, y);
  }
  ENCODERD_ON_CUDA("Linear",
                   LinearCuda(ctx.cuda(), x_dtype, x, rows, weight, epilogue, residual, y));
}

bool LinearRunsOnTeam(const PackedWeight& weight, int64_t rows) {
  return weight.device() == Device::kCpu && LinearRunsOnTeamCpu(weight, rows);
}

void FeedForward(const Context& ctx, DType dtype, const void* x, int64_t rows,
                 const PackedWeight& w_in, Epilogue activation, const PackedWeight& w_out,
                 void* hidden, void* y) {
  FeedForward(ctx, dtype, x, rows, w_in, activation, w_out, dtype, hidden, y);
}

void FeedForward(const Context& ctx, DType x_dtype, const void* x, int64_t rows,
                 const PackedWeight& w_in, Epilogue activation, const PackedWeight& w_out,
                 DType dtype, void* hidden, void* y, bool add_to_y) {
  ctx.CheckActivations("FeedForward", dtype);
  if (x_dtype != dtype && !CpuBf16Pairing(ctx, x_dtype, dtype, w_in, activation)) {
    throw std::invalid_argument("FeedForward: " + std::string(DTypeName(x_dtype)) + " input with " +
                                std::string(DTypeName(w_in.type())) + " weights does not run on " +
                                DeviceName(ctx.device()));
  }
  CheckWeight("FeedForward", ctx, dtype, w_in);
  CheckWeight("FeedForward", ctx, dtype, w_out);
  if (activation == Epilogue::kResidual) {
    throw std::invalid_argument("FeedForward: the activation cannot be the residual epilogue");
  }
  if (w_in.out_features() != w_out.in_features()) {
    throw std::invalid_argument("FeedForward: " + std::to_string(w_in.out_features()) +
                                " hidden features in, " + std::to_string(w_out.in_features()) +
                                " out");
  }
  if (rows < 0) throw std::invalid_argument("FeedForward: negative row count");
  if (rows == 0) return;
  if (x == nullptr || y == nullptr || hidden == nullptr) {
    throw std::invalid_argument("FeedForward: null input, scratch or output");
  }
  if (hidden == x || hidden == y) throw std::invalid_argument("FeedForward: scratch aliases");
  // In place, a chunk's output rows would overwrite input rows still unread.
  if (x == y && (w_in.in_features() != w_out.out_features() || x_dtype != dtype || !add_to_y)) {
    throw std::invalid_argument(
        "FeedForward: output aliases an input of another width or dtype, or one it replaces");
  }
  if (ctx.device() == Device::kCpu &&
      FeedForwardCpu(ctx.cpu(), x_dtype, x, rows, w_in, activation, w_out,
                     static_cast<float*>(hidden), static_cast<float*>(y), add_to_y)) {
    return;
  }
  Linear(ctx, x_dtype, x, rows, w_in, activation, nullptr, dtype, hidden);
  Linear(ctx, dtype, hidden, rows, w_out, add_to_y ? Epilogue::kResidual : Epilogue::kNone,
         add_to_y ? y : nullptr, y);
}

}  // namespace encoderd::kernels
