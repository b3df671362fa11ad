#include "kernels/cuda/cuda_context.h"

#include "kernels/cuda/cuda_check.h"

namespace encoderd::kernels {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper

cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

int CudaDeviceCount(std::string* reason) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // reset the runtime's last-error state
    if (reason) *reason = cudaGetErrorString(e);
    return 0;
  }
  if (count == 0 && reason) *reason = "the CUDA runtime reports 0 devices";
  return count;
}

std::unique_ptr<CudaContext> CudaContext::Create(int device) {
  std::unique_ptr<CudaContext> ctx(new CudaContext(device));
  ENCODERD_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  ENCODERD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ctx->stream_ = stream;
  cublasLtHandle_t handle = nullptr;
  ENCODERD_CUBLAS_CHECK(cublasLtCreate(&handle));
  ctx->lt_handle_ = handle;
  ENCODERD_CUDA_CHECK(cudaMalloc(&ctx->workspace_, kWorkspaceBytes));
  ctx->workspace_bytes_ = kWorkspaceBytes;
  return ctx;
}

CudaContext::~CudaContext() {
  // Errors are ignored here: a destructor must not throw, and a failed device
  // has already reported its error to the op that met it.
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(AsStream(stream_));
  for (auto& [size, blocks] : cached_) {
    for (void* p : blocks) cudaFree(p);
  }
  for (auto& [p, size] : live_) cudaFree(p);
  if (workspace_) cudaFree(workspace_);
  if (lt_handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_handle_));
  if (stream_) cudaStreamDestroy(AsStream(stream_));
}

size_t CudaContext::SizeClass(size_t bytes) {
  // Powers of two up to 64 MiB, then 2 MiB steps: activation buffers that grow
  // with the batch are reused instead of reallocated on every size change.
  constexpr size_t kLarge = size_t{64} << 20, kStep = size_t{2} << 20;
  if (bytes > kLarge) return (bytes + kStep - 1) / kStep * kStep;
  size_t c = 256;
  while (c < bytes) c <<= 1;
  return c;
}

void* CudaContext::Allocate(size_t bytes) {
  const size_t size = SizeClass(bytes == 0 ? 1 : bytes);
  auto it = cached_.find(size);
  void* p = nullptr;
  if (it != cached_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    ENCODERD_CUDA_CHECK(cudaSetDevice(device_));
    cudaError_t e = cudaMalloc(&p, size);
    if (e == cudaErrorMemoryAllocation) {
      // Give the cache back and try once more before failing.
      cudaGetLastError();
      ReleaseCached();
      e = cudaMalloc(&p, size);
    }
    ENCODERD_CUDA_CHECK(e);
  }
  live_[p] = size;
  return p;
}

void CudaContext::Free(void* ptr) {
  auto it = live_.find(ptr);
  if (it == live_.end()) return;
  cached_[it->second].push_back(ptr);
  live_.erase(it);
}

void CudaContext::ReleaseCached() {
  ENCODERD_CUDA_CHECK(cudaStreamSynchronize(AsStream(stream_)));
  ENCODERD_CUDA_CHECK(cudaSetDevice(device_));
  for (auto& [size, blocks] : cached_) {
    for (void* b : blocks) cudaFree(b);
    blocks.clear();
  }
}

size_t CudaContext::cached_bytes() const {
  size_t bytes = 0;
  for (const auto& [size, blocks] : cached_) bytes += size * blocks.size();
  return bytes;
}

void* CudaContext::AllocateHost(size_t bytes) {
  void* p = nullptr;
  ENCODERD_CUDA_CHECK(cudaMallocHost(&p, bytes == 0 ? 1 : bytes));
  return p;
}

void CudaContext::FreeHost(void* ptr) {
  if (ptr) cudaFreeHost(ptr);
}

void CudaContext::CopyToDevice(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  ENCODERD_CUDA_CHECK(
      cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, AsStream(stream_)));
}

void CudaContext::CopyToHost(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  ENCODERD_CUDA_CHECK(
      cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, AsStream(stream_)));
}

void CudaContext::Synchronize() { ENCODERD_CUDA_CHECK(cudaStreamSynchronize(AsStream(stream_))); }

CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

std::unique_ptr<CudaGraph> CudaContext::Capture(const std::function<void()>& record) {
  ENCODERD_CUDA_CHECK(cudaSetDevice(device_));
  ENCODERD_CUDA_CHECK(cudaStreamBeginCapture(AsStream(stream_), cudaStreamCaptureModeThreadLocal));
  std::unique_ptr<CudaGraph> graph(new CudaGraph());
  cudaGraph_t recorded = nullptr;
  try {
    record();
  } catch (...) {
    // End the capture so that the stream takes ordinary work again.
    cudaStreamEndCapture(AsStream(stream_), &recorded);
    if (recorded) cudaGraphDestroy(recorded);
    cudaGetLastError();
    throw;
  }
  ENCODERD_CUDA_CHECK(cudaStreamEndCapture(AsStream(stream_), &recorded));
  graph->graph_ = recorded;
  cudaGraphExec_t exec = nullptr;
  ENCODERD_CUDA_CHECK(cudaGraphInstantiate(&exec, recorded, 0));
  graph->exec_ = exec;
  return graph;
}

void CudaContext::Launch(const CudaGraph& graph) {
  ENCODERD_CUDA_CHECK(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.exec_), AsStream(stream_)));
}

}  // namespace encoderd::kernels
