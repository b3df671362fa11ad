// BatchEngine over the native Encoder (engine/runtime/encoder.h): one Forward
// per batch asking for only the rows the batch's sequences read (pooled rows
// per pooling mode, every token's row only for hidden states), then the
// encoder's pool_dense/normalize and head for each output variant. Copies
// rows out of the encoder's tensors; does no math of its own.
#pragma once

#include <memory>

#include "engine/runtime/encoder.h"
#include "server/core/batch_engine.h"

namespace encoderd::server {

class EncoderBatchEngine final : public BatchEngine {
 public:
  explicit EncoderBatchEngine(std::unique_ptr<Encoder> encoder) : encoder_(std::move(encoder)) {}
  StatusOr<std::vector<std::vector<float>>> Run(const PackedBatch& batch,
                                                const std::vector<OutputSpec>& specs,
                                                const std::function<bool()>& stop) override;
  Encoder& encoder() { return *encoder_; }

 private:
  std::unique_ptr<Encoder> encoder_;
};

}  // namespace encoderd::server
