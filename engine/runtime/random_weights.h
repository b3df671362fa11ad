// Seeded random weights under the canonical names of model_spec.h, for
// benchmarks and for tests at shapes no fixture file has (BERT-base width).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "engine/model/model_spec.h"

namespace encoderd {

// BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072, GELU, post-norm.
EncoderConfig BertBaseConfig();

// Every weight `config` needs: Linear weights ~ N(0, 0.02), biases ~ N(0, 0.02),
// LayerNorm gamma ~ N(1, 0.05) and beta ~ N(0, 0.05). Same seed, same weights.
TensorMap RandomEncoderWeights(const EncoderConfig& config, uint32_t seed);

}  // namespace encoderd
