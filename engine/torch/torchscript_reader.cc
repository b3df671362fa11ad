// TorchScript archives (torch.jit.save) hold code as well as data, so they
// are read through LibTorch itself; this is the only reader that copies.
#include <torch/script.h>

#include <cstring>

#include "engine/io/checkpoint_formats.h"

namespace encoderd {
namespace {

// Serves LibTorch's zip reader from bytes already in memory.
class StorageReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit StorageReadAdapter(std::shared_ptr<const Storage> bytes) : bytes_(std::move(bytes)) {}
  size_t size() const override { return bytes_->size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_->size()) return 0;
    n = std::min<size_t>(n, bytes_->size() - pos);
    std::memcpy(buf, bytes_->data() + pos, n);
    return n;
  }

 private:
  std::shared_ptr<const Storage> bytes_;
};

std::optional<DType> FromScalarType(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat:
      return DType::kFloat32;
    case c10::kHalf:
      return DType::kFloat16;
    case c10::kBFloat16:
      return DType::kBFloat16;
    case c10::kDouble:
      return DType::kFloat64;
    case c10::kLong:
      return DType::kInt64;
    case c10::kInt:
      return DType::kInt32;
    case c10::kShort:
      return DType::kInt16;
    case c10::kChar:
      return DType::kInt8;
    case c10::kByte:
      return DType::kUInt8;
    case c10::kBool:
      return DType::kBool;
    default:
      return std::nullopt;
  }
}

StatusOr<Tensor> CopyTensor(const std::string& name, const at::Tensor& in) {
  const at::Tensor t = in.detach().cpu().contiguous();
  const std::optional<DType> dtype = FromScalarType(t.scalar_type());
  if (!dtype) {
    return Unimplemented("TorchScript tensor '" + name + "' has unsupported dtype " +
                         std::string(c10::toString(t.scalar_type())));
  }
  auto storage = std::make_shared<OwnedStorage>(t.nbytes());
  if (t.nbytes() > 0) std::memcpy(storage->mutable_data(), t.data_ptr(), t.nbytes());
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  return Tensor::Contiguous(std::move(storage), *dtype, std::move(shape));
}

}  // namespace

StatusOr<TensorMap> ReadTorchScript(std::shared_ptr<const Storage> bytes) {
  try {
    torch::jit::Module module =
        torch::jit::load(std::make_shared<StorageReadAdapter>(bytes), c10::Device(c10::kCPU));
    TensorMap tensors;
    for (const auto& p : module.named_parameters(/*recurse=*/true)) {
      ASSIGN_OR_RETURN(Tensor t, CopyTensor(p.name, p.value));
      tensors.emplace(p.name, std::move(t));
    }
    for (const auto& b : module.named_buffers(/*recurse=*/true)) {
      ASSIGN_OR_RETURN(Tensor t, CopyTensor(b.name, b.value));
      tensors.emplace(b.name, std::move(t));
    }
    return tensors;
  } catch (const std::exception& e) {
    std::string what = e.what();
    // LibTorch appends a C++ backtrace; keep the first line.
    if (const size_t nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    return DataLoss("TorchScript archive could not be loaded by LibTorch: " + what);
  }
}

}  // namespace encoderd
