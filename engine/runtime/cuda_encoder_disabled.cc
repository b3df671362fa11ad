// CreateCudaEncoder in builds without the CUDA backend (no nvcc at configure time).
#include "engine/runtime/cuda_encoder.h"

namespace encoderd {

StatusOr<std::unique_ptr<Encoder>> CreateCudaEncoder(const EncoderConfig&, TensorMap,
                                                     const EncoderOptions&) {
  return Unimplemented(
      "device cuda: this build has no CUDA backend (nvcc not found at build time)");
}

}  // namespace encoderd
