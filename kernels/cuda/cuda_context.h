// The CUDA execution context of one encoder replica: device, stream, cuBLASLt
// handle, GEMM workspace and a caching device allocator. Opaque: this header
// exposes no CUDA type, so engine/ and tests can include it without the
// toolkit's headers.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace encoderd::kernels {

// Number of CUDA devices the runtime can use; 0 when there is no driver or no
// device. Never throws. `reason` (optional) receives the runtime's message
// when the count is 0.
int CudaDeviceCount(std::string* reason = nullptr);

// Stream work recorded once (a CUDA graph) and queued again with one launch:
// the same kernels with the same arguments and pointers, so the memory they
// use must still be where it was when it was recorded.
class CudaGraph {
 public:
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

 private:
  friend class CudaContext;
  CudaGraph() = default;
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
};

// Ops called with the same context run in order on its stream and must not be
// called concurrently from several threads; different contexts may.
class CudaContext {
 public:
  // Binds `device`, creates a non-blocking stream, the cuBLASLt handle and
  // the GEMM workspace. Throws std::runtime_error with the CUDA message.
  static std::unique_ptr<CudaContext> Create(int device);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  // cudaStream_t and cublasLtHandle_t, as opaque pointers for kernels/cuda.
  void* stream() const { return stream_; }
  void* lt_handle() const { return lt_handle_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

  // Device memory, at least 256-byte aligned. Freed blocks are kept per
  // size class and reused; everything is returned to CUDA in the destructor.
  // Free may be called while work using the block is still queued on stream():
  // the block is only handed out again to work queued later on that stream.
  void* Allocate(size_t bytes);
  void Free(void* ptr);
  // Waits for stream() and returns every cached (freed) block to CUDA: after
  // loading, whose staging blocks no later allocation reuses.
  void ReleaseCached();
  // Bytes of the blocks in the cache.
  size_t cached_bytes() const;
  // Page-locked host memory (for asynchronous copies); tied to no context.
  static void* AllocateHost(size_t bytes);
  static void FreeHost(void* ptr);

  // Asynchronous copies on stream(); host pointers should be page-locked.
  void CopyToDevice(void* device_dst, const void* host_src, size_t bytes);
  void CopyToHost(void* host_dst, const void* device_src, size_t bytes);
  // Waits for all work queued on stream(); throws on an asynchronous error.
  void Synchronize();

  // Records what `record` queues on stream() as a graph, without running it
  // (`record` must not allocate device memory or wait for the stream). If
  // `record` throws, the recording is abandoned and the exception propagates.
  std::unique_ptr<CudaGraph> Capture(const std::function<void()>& record);
  // Queues the work of `graph` on stream().
  void Launch(const CudaGraph& graph);

  // The GEMM algorithm cuBLASLt chose for a problem (gemm_cublaslt.cc makes
  // the key and reads the opaque 64 bytes): its heuristic costs more host time
  // than a small GEMM takes on the device, so it is asked once per problem.
  using GemmKey = std::array<int64_t, 6>;
  std::map<GemmKey, std::array<uint64_t, 8>>& gemm_algorithms() { return gemm_algorithms_; }

 private:
  explicit CudaContext(int device) : device_(device) {}
  static size_t SizeClass(size_t bytes);

  int device_;
  void* stream_ = nullptr;
  void* lt_handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<void*, size_t> live_;                 // allocated block -> size class
  std::map<size_t, std::vector<void*>> cached_;  // size class -> free blocks
  std::map<GemmKey, std::array<uint64_t, 8>> gemm_algorithms_;
};

// Device memory owned through a context's allocator (RAII).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(CudaContext* ctx, size_t bytes)
      : ctx_(ctx), ptr_(bytes ? ctx->Allocate(bytes) : nullptr), bytes_(bytes) {}
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ctx_ = o.ctx_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  void Reset() {
    if (ptr_) ctx_->Free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  // Grows to at least `bytes` (contents are not kept).
  void Reserve(CudaContext* ctx, size_t bytes) {
    if (bytes_ >= bytes) return;
    Reset();
    ctx_ = ctx;
    ptr_ = ctx->Allocate(bytes);
    bytes_ = bytes;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  CudaContext* ctx_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// What the kernels support, for an encoder to check a model against before
// it loads: the attention kernel's head sizes (a multiple of 16 up to 128),
// and the largest hidden size of the LayerNorm and embedding kernels (each
// row is held in shared memory).
bool CudaAttentionSupports(int64_t head_dim);
constexpr int64_t kCudaMaxNormHidden = 12256;

// Copies n fp32 values from host memory (pageable is fine) to the device at
// `out` as `dtype` (float16 or bfloat16, rounded to nearest even) through a
// device staging buffer; returns once `host` has been read (kernels/cuda/cast.cu).
void CudaUploadAs(CudaContext& ctx, DType dtype, const float* host, int64_t n, void* out);

}  // namespace encoderd::kernels
