// The throughput calibration a model runs as it loads: one batch of each
// size class of the throughput estimate (admission_policy.h), timed on one
// replica before any call, so that the deadline rules predict from the
// first call (docs/reliability.md, "Overload control").
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "engine/model/model_spec.h"
#include "server/core/batch_engine.h"
#include "server/core/batch_policy.h"

namespace encoderd::server {

// One calibration batch: `sequences` sequences of `length` tokens, the last
// `last_length` long.
struct CalibrationBatch {
  int64_t tokens = 0;
  int64_t length = 0;
  int64_t sequences = 0;
  int64_t last_length = 0;
};

// The batches, largest first: 2,048, 512, 128 and 32 tokens, each held to
// what the batcher forms (max_batch_tokens, and max_batch_sequences of up to
// `max_tokens` tokens), in sequences of 128 tokens (longer where
// max_batch_sequences needs them to reach the size, up to max_tokens). A
// size held below the first of its size class falls into a smaller one and
// is left out when a batch already stands for that class.
std::vector<CalibrationBatch> CalibrationBatches(const BatchLimits& limits, int64_t max_tokens);

// A batch of `tokens` took `took`.
struct CalibrationRun {
  int64_t tokens = 0;
  Clock::duration took{};
};

// Runs each of `batches` through `engine` (token ids valid for `config`:
// BOS, filler, EOS; embeddings at its default pooling), once untimed, since
// a first batch of a size took 1.2-2.6 times as long as the next (the set-up
// of its size, and the memory of a new largest batch), then timed: a batch
// under 100 ms up to three times, the fastest kept, so that one pause does
// not make its size look slow. An engine error names the batch and how to
// avoid it. `short_batch`: the time under which a batch is timed again.
StatusOr<std::vector<CalibrationRun>> RunCalibration(
    BatchEngine* engine, const EncoderConfig& config, const std::vector<CalibrationBatch>& batches,
    Clock::duration short_batch = std::chrono::milliseconds(100));

}  // namespace encoderd::server
