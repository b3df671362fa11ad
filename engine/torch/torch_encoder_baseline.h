// PyTorch's own encoder execution paths, driven through LibTorch on the same
// canonical weights as encoderd's engine: the baselines of `encoderd bench`
// and a second reference in tests. This header includes no LibTorch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/model/model_spec.h"

namespace encoderd {

enum class TorchBaselineMode {
  // The layer math as separate ATen ops on a padded batch (nn.TransformerEncoderLayer
  // with the fastpath off).
  kSlowPath,
  // at::_transformer_encoder_layer_fwd on the padded batch with a key padding mask.
  kFastpath,
  // The same kernel on a nested tensor built by at::_nested_tensor_from_mask,
  // as nn.TransformerEncoder does (padding-free).
  kNestedFastpath,
};

const char* TorchBaselineModeName(TorchBaselineMode mode);

class TorchEncoderBaseline {
 public:
  // `weights` uses the canonical names of model_spec.h. `dtype` is float32 or
  // bfloat16 (weights and activations converted once here).
  static StatusOr<std::unique_ptr<TorchEncoderBaseline>> Create(const EncoderConfig& config,
                                                                const TensorMap& weights,
                                                                DType dtype);
  virtual ~TorchEncoderBaseline() = default;

  // Last hidden states of every sequence, packed end to end: float32
  // [sum of lengths, hidden]. Token types are all 0.
  virtual StatusOr<Tensor> Forward(TorchBaselineMode mode,
                                   const std::vector<std::vector<int32_t>>& sequences) = 0;
};

// Sets LibTorch's intra-op thread count and returns a description of its
// parallel backend and BLAS ("OpenMP, 2 threads, BLAS: openblas-pthread").
std::string ConfigureTorchThreads(int threads);

}  // namespace encoderd
