// What an executor runs: one packed batch in, one result per sequence out.
// The real implementation wraps engine/runtime/encoder.h
// (encoder_batch_engine.h); tests use fakes.
#pragma once

#include <functional>
#include <vector>

#include "core/status.h"
#include "engine/runtime/packed_batch.h"
#include "server/core/inference_request.h"

namespace encoderd::server {

class BatchEngine {
 public:
  virtual ~BatchEngine() = default;
  // `specs[i]` says what to compute for sequence i of `batch`. Returns one
  // float vector per sequence, in batch order: the embedding, the label
  // probabilities, or the row-major [length, hidden] hidden states.
  // `stop` (may be empty) is asked while the batch runs; once it says true
  // the engine may end early with CANCELLED (every request of the batch is
  // gone). Called from one executor thread at a time.
  virtual StatusOr<std::vector<std::vector<float>>> Run(const PackedBatch& batch,
                                                        const std::vector<OutputSpec>& specs,
                                                        const std::function<bool()>& stop) = 0;
};

}  // namespace encoderd::server
