// Host tensors as read from checkpoints: a typed, strided view into a shared
// byte Storage (an mmap'ed file or an owned buffer). Views and tied weights
// share one Storage; nothing is copied until Contiguous()/ToFloat32() is asked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace encoderd {

// Immutable bytes. Subclasses own the memory (mapping or heap buffer).
class Storage {
 public:
  virtual ~Storage() = default;
  virtual const std::byte* data() const = 0;
  virtual size_t size() const = 0;
  // Hint that bytes [offset, offset + size) will not be read again soon.
  // Mapped files drop those pages from memory (a later read faults them back
  // in from the file); other storages ignore it. Contents never change.
  virtual void ReleasePages(size_t offset, size_t size) const {}
};

// A heap buffer. Writable until it is shared as a Storage.
class OwnedStorage final : public Storage {
 public:
  explicit OwnedStorage(size_t bytes) : bytes_(bytes) {}
  explicit OwnedStorage(std::vector<std::byte> bytes) : bytes_(std::move(bytes)) {}
  const std::byte* data() const override { return bytes_.data(); }
  std::byte* mutable_data() { return bytes_.data(); }
  size_t size() const override { return bytes_.size(); }

 private:
  std::vector<std::byte> bytes_;
};

// A read-only memory mapping of a whole file.
class MappedFile final : public Storage {
 public:
  static StatusOr<std::shared_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile() override;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const override { return data_; }
  size_t size() const override { return size_; }
  void ReleasePages(size_t offset, size_t size) const override;
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const std::byte* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const std::byte* data_;
  size_t size_;
};

// A window [offset, offset + size) of another Storage, keeping it alive.
class StorageSlice final : public Storage {
 public:
  StorageSlice(std::shared_ptr<const Storage> base, size_t offset, size_t size)
      : base_(std::move(base)), offset_(offset), size_(size) {}
  const std::byte* data() const override { return base_->data() + offset_; }
  size_t size() const override { return size_; }
  void ReleasePages(size_t offset, size_t size) const override {
    base_->ReleasePages(offset_ + offset, size);
  }

 private:
  std::shared_ptr<const Storage> base_;
  size_t offset_;
  size_t size_;
};

class Tensor {
 public:
  Tensor() = default;

  // Checks that every element addressed by (offset, shape, strides) lies
  // inside `storage` (strides and offset in elements, all non-negative).
  static StatusOr<Tensor> View(std::shared_ptr<const Storage> storage, DType dtype,
                               std::vector<int64_t> shape, std::vector<int64_t> strides,
                               int64_t offset_elements);
  // A contiguous tensor over the whole of `storage`, whose size must match.
  static StatusOr<Tensor> Contiguous(std::shared_ptr<const Storage> storage, DType dtype,
                                     std::vector<int64_t> shape);
  // A new zero-filled contiguous tensor.
  static Tensor Zeros(DType dtype, std::vector<int64_t> shape);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const { return shape_.at(static_cast<size_t>(d)); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool defined() const { return storage_ != nullptr; }
  bool IsContiguous() const;
  // True when the first element's address is a multiple of the element size.
  // Legacy (pre-1.6) and safetensors files place tensors at any byte offset;
  // reading such data through a typed pointer is undefined behaviour.
  bool IsAligned() const;
  const std::shared_ptr<const Storage>& storage() const { return storage_; }

  // Pointer to the first element (at offset). Only meaningful as a flat array
  // when IsContiguous().
  const std::byte* raw_data() const {
    return storage_->data() + static_cast<size_t>(offset_) * DTypeSize(dtype_);
  }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(raw_data());
  }
  // Writable pointer; only valid for tensors made by Zeros() that are not yet shared.
  template <typename T>
  T* mutable_data() {
    return reinterpret_cast<T*>(const_cast<std::byte*>(raw_data()));
  }

  // This tensor if already contiguous and aligned, else a contiguous,
  // aligned copy.
  Tensor ToContiguous() const;
  // A contiguous, aligned copy converted to `dtype` (float types and integer
  // types convert as PyTorch's .to() would; returns *this when nothing
  // changes).
  Tensor To(DType dtype) const;
  // "float32[768, 3072]"
  std::string Describe() const;
  // Storage::ReleasePages over the bytes this tensor addresses.
  void ReleasePages() const;
  // True when dtype, shape and every element's bytes are equal.
  bool BitEqual(const Tensor& other) const;

 private:
  std::shared_ptr<const Storage> storage_;
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;
};

std::string ShapeToString(const std::vector<int64_t>& shape);
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape);

// name -> tensor, ordered by name.
using TensorMap = std::map<std::string, Tensor>;

}  // namespace encoderd
