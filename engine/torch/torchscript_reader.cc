// TorchScript archives (torch.jit.save) hold code as well as data, so they
// are read through LibTorch itself; this is the only reader that copies.
#include <torch/script.h>

#include <cstring>
#include <map>
#include <utility>
#include <vector>

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

// Copies the archive's tensors out of LibTorch, each view once: names of
// one view (tied weights) share its copy. A view that repeats its storage's
// elements (expand(): a 4 KB archive can hold a float32[2^17, 2^17] view,
// 64 GiB once copied) is refused, and the copies may not add up to more
// than twice the archive's bytes.
class TensorCopier {
 public:
  explicit TensorCopier(uint64_t archive_bytes) : budget_(2 * archive_bytes + (1 << 20)) {}

  StatusOr<Tensor> Copy(const std::string& name, const at::Tensor& in) {
    const std::optional<DType> dtype = FromScalarType(in.scalar_type());
    if (!dtype) {
      return Unimplemented("TorchScript tensor '" + name + "' has unsupported dtype " +
                           std::string(c10::toString(in.scalar_type())));
    }
    const uint64_t bytes = in.nbytes();
    if (in.numel() > 0 && bytes > in.storage().nbytes()) {
      return DataLoss("TorchScript tensor '" + name + "' repeats elements of its storage (" +
                      std::to_string(in.storage().nbytes()) + " bytes) to " +
                      std::to_string(bytes) + " bytes, as expand() makes");
    }
    const View view{in.numel() > 0 ? in.data_ptr() : nullptr, *dtype,
                    std::vector<int64_t>(in.sizes().begin(), in.sizes().end()),
                    std::vector<int64_t>(in.strides().begin(), in.strides().end())};
    if (view.data != nullptr) {
      for (const auto& [seen, copy] : copies_[view.data]) {
        if (seen == view) return copy;
      }
    }
    if (bytes > budget_ - copied_) {
      return DataLoss("TorchScript tensors copied to more than " + std::to_string(budget_) +
                      " bytes (twice the archive) at '" + name + "'");
    }
    copied_ += bytes;
    const at::Tensor t = in.detach().cpu().contiguous();
    auto storage = std::make_shared<OwnedStorage>(t.nbytes());
    if (t.nbytes() > 0) std::memcpy(storage->mutable_data(), t.data_ptr(), t.nbytes());
    ASSIGN_OR_RETURN(Tensor copy, Tensor::Contiguous(std::move(storage), *dtype, view.shape));
    if (view.data != nullptr) copies_[view.data].emplace_back(view, copy);
    return copy;
  }

 private:
  struct View {
    const void* data;
    DType dtype;
    std::vector<int64_t> shape, strides;
    bool operator==(const View& o) const {
      return data == o.data && dtype == o.dtype && shape == o.shape && strides == o.strides;
    }
  };
  const uint64_t budget_;
  uint64_t copied_ = 0;
  // The copies made, by the address of their first element.
  std::map<const void*, std::vector<std::pair<View, Tensor>>> copies_;
};

}  // namespace

StatusOr<TensorMap> ReadTorchScript(std::shared_ptr<const Storage> bytes) {
  try {
    torch::jit::Module module =
        torch::jit::load(std::make_shared<StorageReadAdapter>(bytes), c10::Device(c10::kCPU));
    TensorMap tensors;
    TensorCopier copier(bytes->size());
    for (const auto& p : module.named_parameters(/*recurse=*/true)) {
      ASSIGN_OR_RETURN(Tensor t, copier.Copy(p.name, p.value));
      tensors.emplace(p.name, std::move(t));
    }
    for (const auto& b : module.named_buffers(/*recurse=*/true)) {
      ASSIGN_OR_RETURN(Tensor t, copier.Copy(b.name, b.value));
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
