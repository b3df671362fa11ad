#include "core/tensor.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace encoderd {
namespace {

// The element of a strided walk: returns byte offsets of each element in order.
template <typename Fn>
void ForEachElement(const Tensor& t, Fn&& fn) {
  const size_t dims = t.shape().size();
  const int64_t n = t.numel();
  if (n == 0) return;
  std::vector<int64_t> index(dims, 0);
  int64_t linear = t.offset();
  for (int64_t i = 0; i < n; ++i) {
    fn(i, linear);
    for (size_t d = dims; d-- > 0;) {
      if (++index[d] < t.shape()[d]) {
        linear += t.strides()[d];
        break;
      }
      linear -= t.strides()[d] * (t.shape()[d] - 1);
      index[d] = 0;
    }
  }
}

double LoadAsDouble(DType dtype, const std::byte* p) {
  switch (dtype) {
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return HalfToFloat(v);
    }
    case DType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return BFloat16ToFloat(v);
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kInt16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case DType::kInt8:
      return static_cast<double>(static_cast<int8_t>(*p));
    case DType::kUInt8:
      return static_cast<double>(static_cast<uint8_t>(*p));
    case DType::kBool:
      return *p != std::byte{0} ? 1.0 : 0.0;
  }
  return 0;
}

int64_t LoadAsInt64(DType dtype, const std::byte* p) {
  switch (dtype) {
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kInt16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    default:
      return static_cast<int64_t>(LoadAsDouble(dtype, p));
  }
}

void StoreFrom(DType dtype, std::byte* p, double v, int64_t iv, bool integral_source) {
  switch (dtype) {
    case DType::kFloat32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case DType::kFloat64:
      std::memcpy(p, &v, 8);
      return;
    case DType::kFloat16: {
      uint16_t h = FloatToHalf(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::kBFloat16: {
      uint16_t b = FloatToBFloat16(static_cast<float>(v));
      std::memcpy(p, &b, 2);
      return;
    }
    case DType::kInt64: {
      int64_t x = integral_source ? iv : static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      return;
    }
    case DType::kInt32: {
      int32_t x = static_cast<int32_t>(integral_source ? iv : static_cast<int64_t>(v));
      std::memcpy(p, &x, 4);
      return;
    }
    case DType::kInt16: {
      int16_t x = static_cast<int16_t>(integral_source ? iv : static_cast<int64_t>(v));
      std::memcpy(p, &x, 2);
      return;
    }
    case DType::kInt8:
      *p = static_cast<std::byte>(
          static_cast<int8_t>(integral_source ? iv : static_cast<int64_t>(v)));
      return;
    case DType::kUInt8:
      *p = static_cast<std::byte>(
          static_cast<uint8_t>(integral_source ? iv : static_cast<int64_t>(v)));
      return;
    case DType::kBool:
      *p = static_cast<std::byte>(v != 0.0 ? 1 : 0);
      return;
  }
}

}  // namespace

StatusOr<std::shared_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Internal(path + ": fstat failed: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const std::byte* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Internal(path + ": mmap failed: " + std::strerror(err));
    }
    data = static_cast<const std::byte*>(p);
  }
  ::close(fd);
  return std::shared_ptr<MappedFile>(new MappedFile(path, data, size));
}

void MappedFile::ReleasePages(size_t offset, size_t size) const {
  if (data_ == nullptr || offset >= size_) return;
  size = std::min(size, size_ - offset);
  // Only whole pages inside the range: neighbouring tensors keep theirs.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data_ + offset);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + size) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

StatusOr<Tensor> Tensor::View(std::shared_ptr<const Storage> storage, DType dtype,
                              std::vector<int64_t> shape, std::vector<int64_t> strides,
                              int64_t offset_elements) {
  if (!storage) return InvalidArgument("tensor has no storage");
  if (shape.size() != strides.size()) {
    return InvalidArgument("shape " + ShapeToString(shape) + " and strides " +
                           ShapeToString(strides) + " differ in rank");
  }
  if (offset_elements < 0) return InvalidArgument("negative storage offset");
  // Highest element index addressed, computed with overflow checks.
  const int64_t kMax = std::numeric_limits<int64_t>::max() / 16;
  int64_t last = offset_elements;
  int64_t numel = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0 || strides[d] < 0) {
      return InvalidArgument("negative size or stride in " + ShapeToString(shape));
    }
    if (shape[d] > 0 && numel > kMax / shape[d]) return InvalidArgument("tensor too large");
    numel *= shape[d];
  }
  if (numel > 0) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] > 1 && strides[d] > kMax / (shape[d] - 1)) {
        return InvalidArgument("stride too large");
      }
      last += strides[d] * (shape[d] - 1);
      if (last > kMax) return InvalidArgument("tensor extent too large");
    }
    const size_t esize = DTypeSize(dtype);
    const size_t end_byte = (static_cast<size_t>(last) + 1) * esize;
    if (end_byte > storage->size()) {
      return DataLoss("tensor " + ShapeToString(shape) + " at element offset " +
                      std::to_string(offset_elements) + " needs " + std::to_string(end_byte) +
                      " bytes but its storage has " + std::to_string(storage->size()));
    }
  }
  Tensor t;
  t.storage_ = std::move(storage);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.offset_ = offset_elements;
  return t;
}

StatusOr<Tensor> Tensor::Contiguous(std::shared_ptr<const Storage> storage, DType dtype,
                                    std::vector<int64_t> shape) {
  auto strides = ContiguousStrides(shape);
  const size_t storage_bytes = storage ? storage->size() : 0;
  ASSIGN_OR_RETURN(Tensor t, View(std::move(storage), dtype, std::move(shape), strides, 0));
  if (t.nbytes() != storage_bytes) {
    return DataLoss("tensor " + t.Describe() + " needs " + std::to_string(t.nbytes()) +
                    " bytes, storage has " + std::to_string(storage_bytes));
  }
  return t;
}

Tensor Tensor::Zeros(DType dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  auto storage = std::make_shared<OwnedStorage>(static_cast<size_t>(n) * DTypeSize(dtype));
  Tensor t;
  t.storage_ = std::move(storage);
  t.dtype_ = dtype;
  t.strides_ = ContiguousStrides(shape);
  t.shape_ = std::move(shape);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

bool Tensor::IsContiguous() const {
  int64_t expected = 1;
  for (size_t d = shape_.size(); d-- > 0;) {
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

bool Tensor::IsAligned() const {
  return !storage_ || reinterpret_cast<uintptr_t>(raw_data()) % DTypeSize(dtype_) == 0;
}

Tensor Tensor::ToContiguous() const {
  if (IsContiguous() && IsAligned()) return *this;
  return To(dtype_);
}

Tensor Tensor::To(DType dtype) const {
  if (dtype == dtype_ && IsContiguous() && IsAligned()) return *this;
  Tensor out = Zeros(dtype, shape_);
  std::byte* dst = out.mutable_data<std::byte>();
  const std::byte* base = storage_->data();
  const size_t in_size = DTypeSize(dtype_);
  const size_t out_size = DTypeSize(dtype);
  const bool integral = !IsFloatingPoint(dtype_);
  ForEachElement(*this, [&](int64_t i, int64_t linear) {
    const std::byte* src = base + static_cast<size_t>(linear) * in_size;
    std::byte* d = dst + static_cast<size_t>(i) * out_size;
    if (dtype == dtype_) {
      std::memcpy(d, src, in_size);
    } else {
      StoreFrom(dtype, d, LoadAsDouble(dtype_, src), integral ? LoadAsInt64(dtype_, src) : 0,
                integral);
    }
  });
  return out;
}

void Tensor::ReleasePages() const {
  if (!storage_ || numel() == 0) return;
  int64_t last = offset_;
  for (size_t d = 0; d < shape_.size(); ++d) last += strides_[d] * (shape_[d] - 1);
  const size_t esize = DTypeSize(dtype_);
  storage_->ReleasePages(static_cast<size_t>(offset_) * esize,
                         static_cast<size_t>(last - offset_ + 1) * esize);
}

std::string Tensor::Describe() const {
  return std::string(DTypeName(dtype_)) + ShapeToString(shape_);
}

bool Tensor::BitEqual(const Tensor& other) const {
  if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  if (nbytes() == 0) return true;  // empty storages may have null data()
  const Tensor a = ToContiguous();
  const Tensor b = other.ToContiguous();
  return std::memcmp(a.raw_data(), b.raw_data(), nbytes()) == 0;
}

}  // namespace encoderd
