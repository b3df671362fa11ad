// Where an op runs. Every op of kernels/ (linear.h, attention.h,
// layer_norm.h, embeddings.h, pooling.h, cast.h) has one signature for every
// device: it takes a Context, the dtype of the activations, and pointers that
// live on the context's device, and runs there (kernels/cpu/ or
// kernels/cuda/). The engine writes each op call once.
#pragma once

#include <stdexcept>
#include <string>

#include "core/dtype.h"
#include "core/op_types.h"

namespace encoderd::kernels {

class CpuContext;
class CudaContext;

// The CPU with a CpuContext's threads and oneDNN stream, or one CUDA device
// with a CudaContext's stream (kernels/cuda/cuda_context.h). A view: the
// context it names must outlive it. Implicit from either, so that a
// CpuContext can be passed where an op takes a Context.
class Context {
 public:
  Context(const CpuContext& cpu) : device_(Device::kCpu), cpu_(&cpu) {}  // NOLINT
  Context(CudaContext& cuda) : device_(Device::kCuda), cuda_(&cuda) {}   // NOLINT

  Device device() const { return device_; }
  // The device's own context; std::logic_error on the other device.
  const CpuContext& cpu() const {
    if (cpu_ == nullptr) throw std::logic_error("not a CPU context");
    return *cpu_;
  }
  CudaContext& cuda() const {
    if (cuda_ == nullptr) throw std::logic_error("not a CUDA context");
    return *cuda_;
  }

  // Throws std::invalid_argument unless `dtype` is an activation type of this
  // device: float32 on the CPU (bfloat16 and int8 are weight types there),
  // float16 or bfloat16 on CUDA.
  void CheckActivations(const char* op, DType dtype) const {
    const bool ok = device_ == Device::kCpu ? dtype == DType::kFloat32
                                            : dtype == DType::kFloat16 || dtype == DType::kBFloat16;
    if (!ok) {
      throw std::invalid_argument(std::string(op) + ": " + std::string(DTypeName(dtype)) +
                                  " activations do not run on " + DeviceName(device_));
    }
  }

 private:
  Device device_;
  const CpuContext* cpu_ = nullptr;
  CudaContext* cuda_ = nullptr;
};

}  // namespace encoderd::kernels
