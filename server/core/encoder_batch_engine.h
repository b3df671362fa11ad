// BatchEngine over the native Encoder (engine/runtime/encoder.h): one Forward
// per batch, then the engine's Pool / Classify for the output variants the
// batch's sequences ask for. Copies rows out of the engine's tensors; does no
// math of its own.
#pragma once

#include <memory>

#include "engine/runtime/encoder.h"
#include "server/core/batch_engine.h"

namespace encoderd::server {

class EncoderBatchEngine final : public BatchEngine {
 public:
  explicit EncoderBatchEngine(std::unique_ptr<Encoder> encoder) : encoder_(std::move(encoder)) {}
  StatusOr<std::vector<std::vector<float>>> Run(const PackedBatch& batch,
                                                const std::vector<OutputSpec>& specs) override;
  Encoder& encoder() { return *encoder_; }

 private:
  std::unique_ptr<Encoder> encoder_;
};

}  // namespace encoderd::server
