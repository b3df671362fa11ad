// A buffer that grows on demand and is never shrunk: the CUDA encoder's
// page-locked input staging (cuda_encoder.cc), whose allocation costs
// milliseconds. Header-only, with the allocator as template arguments, so
// that its behaviour when allocating fails is tested without a GPU.
#pragma once

#include <cstddef>

namespace encoderd {

template <void* (*Allocate)(size_t), void (*Release)(void*)>
class GrowOnlyBuffer {
 public:
  GrowOnlyBuffer() = default;
  ~GrowOnlyBuffer() { Release(ptr_); }
  GrowOnlyBuffer(const GrowOnlyBuffer&) = delete;
  GrowOnlyBuffer& operator=(const GrowOnlyBuffer&) = delete;

  // At least `bytes` bytes (contents not kept when it grows). Throws what
  // Allocate throws, and then holds nothing: the next call allocates again
  // (keeping the old size with no memory behind it handed out null for any
  // size up to it, and the caller wrote through it).
  void* Reserve(size_t bytes) {
    if (bytes > bytes_) {
      Release(ptr_);
      ptr_ = nullptr;
      bytes_ = 0;
      ptr_ = Allocate(bytes);
      bytes_ = bytes;
    }
    return ptr_;
  }

  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace encoderd
