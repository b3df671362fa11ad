// Internal to kernels/cuda: error checks that turn CUDA and cuBLASLt failures
// into std::runtime_error. Includes the toolkit headers; never include it
// outside kernels/cuda.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace encoderd::kernels::cuda_detail {

[[noreturn]] inline void ThrowCuda(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error in ") + what + " (" + file + ":" +
                           std::to_string(line) + "): " + cudaGetErrorString(e));
}

[[noreturn]] inline void ThrowCublas(cublasStatus_t s, const char* what, const char* file,
                                     int line) {
  throw std::runtime_error(std::string("cuBLASLt error in ") + what + " (" + file + ":" +
                           std::to_string(line) + "): " + cublasLtGetStatusString(s));
}

}  // namespace encoderd::kernels::cuda_detail

#define ENCODERD_CUDA_CHECK(expr)                                                          \
  do {                                                                                     \
    const cudaError_t encoderd_e_ = (expr);                                                \
    if (encoderd_e_ != cudaSuccess)                                                        \
      ::encoderd::kernels::cuda_detail::ThrowCuda(encoderd_e_, #expr, __FILE__, __LINE__); \
  } while (0)

#define ENCODERD_CUBLAS_CHECK(expr)                                                          \
  do {                                                                                       \
    const cublasStatus_t encoderd_s_ = (expr);                                               \
    if (encoderd_s_ != CUBLAS_STATUS_SUCCESS)                                                \
      ::encoderd::kernels::cuda_detail::ThrowCublas(encoderd_s_, #expr, __FILE__, __LINE__); \
  } while (0)

// Checks that the last kernel launch was accepted (launch configuration errors).
#define ENCODERD_CUDA_CHECK_LAUNCH() ENCODERD_CUDA_CHECK(cudaGetLastError())
