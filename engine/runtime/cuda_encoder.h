// The CUDA backend of Encoder. This header names no CUDA type; the factory is
// defined by cuda_encoder.cc in CUDA builds and by cuda_encoder_disabled.cc
// otherwise, so Encoder::Create links either way.
#pragma once

#include <memory>

#include "core/status.h"
#include "engine/runtime/encoder.h"

namespace encoderd {

// Builds the CUDA encoder for options.device == Device::kCuda. Checked here,
// at load time: UNIMPLEMENTED when the build has no CUDA backend,
// FAILED_PRECONDITION when no CUDA device is visible, INVALID_ARGUMENT for a
// dtype other than float16 / bfloat16 or a head size the attention kernel
// does not support.
StatusOr<std::unique_ptr<Encoder>> CreateCudaEncoder(const EncoderConfig& config, TensorMap weights,
                                                     const EncoderOptions& options);

}  // namespace encoderd
