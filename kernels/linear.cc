#include "kernels/linear.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/linear_cpu.h"

namespace encoderd::kernels {

PackedWeight::PackedWeight(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PackedWeight::~PackedWeight() = default;

std::unique_ptr<PackedWeight> PackedWeight::Pack(const CpuContext& ctx, const float* weight,
                                                 const float* bias, int64_t out_features,
                                                 int64_t in_features, DType type) {
  if (weight == nullptr) throw std::invalid_argument("PackedWeight::Pack: null weight");
  if (type != DType::kFloat32 && type != DType::kBFloat16 && type != DType::kInt8) {
    throw std::invalid_argument("PackedWeight::Pack: weights are float32, bfloat16 or int8, not " +
                                std::string(DTypeName(type)));
  }
  if (out_features <= 0 || in_features <= 0) {
    throw std::invalid_argument("PackedWeight::Pack: bad shape [" + std::to_string(out_features) +
                                ", " + std::to_string(in_features) + "]");
  }
  return std::unique_ptr<PackedWeight>(
      new PackedWeight(PackWeightCpu(ctx, weight, bias, out_features, in_features, type)));
}

int64_t PackedWeight::out_features() const { return impl_->out_features; }
int64_t PackedWeight::in_features() const { return impl_->in_features; }
DType PackedWeight::type() const { return impl_->type; }
size_t PackedWeight::bytes() const {
  size_t n = impl_->weight.get_desc().get_size();
  if (impl_->bias) n += impl_->bias.get_desc().get_size();
  n += (impl_->weight_scale.size() + impl_->weight_comp.size()) * sizeof(float);
  return n;
}

void Linear(const CpuContext& ctx, const float* x, int64_t rows, const PackedWeight& weight,
            Epilogue epilogue, const float* residual, float* y) {
  if (rows < 0) throw std::invalid_argument("Linear: negative row count");
  if (rows == 0) return;
  if (x == nullptr || y == nullptr) throw std::invalid_argument("Linear: null input or output");
  if (epilogue == Epilogue::kResidual && residual == nullptr) {
    throw std::invalid_argument("Linear: residual epilogue without a residual tensor");
  }
  if (x == y) throw std::invalid_argument("Linear: input aliases output");
  LinearCpu(ctx, x, rows, weight, epilogue, residual, y);
}

}  // namespace encoderd::kernels
