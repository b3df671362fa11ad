// The throughput calibration a model runs as it loads: one batch of each
// size class of the throughput estimate (admission_policy.h), timed on one
// replica before any call, so that the deadline rules predict from the
// first call (docs/reliability.md, "Overload control").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
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

// The batches, smallest first: 32, 128, 512 and 2,048 tokens, each held to
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

struct CalibrationOptions {
  // The time the calibration may take: a batch predicted to take it past
  // this (at the previous batch's time per token, its untimed run 2.6 times
  // as long as a timed one, and one timed run, or three under short_batch)
  // is left out with every larger one. A batch runs whole once started, so
  // the calibration may pass the budget by part of one batch's runs.
  Clock::duration budget = std::chrono::seconds(10);
  // The time under which a batch is timed again.
  Clock::duration short_batch = std::chrono::milliseconds(100);
  // The clock (tests pass their own).
  std::function<Clock::time_point()> now = [] { return Clock::now(); };
};

struct Calibration {
  std::vector<CalibrationRun> runs;  // timed, smallest first
  // The batches left out for the budget, each at the largest timed batch's
  // time per token times 1.25 (larger batches took up to 7% longer per
  // token): rates that the first calls of their size replace.
  std::vector<CalibrationRun> estimated;
};

// Runs `batches` (smallest first) through `engine` (token ids valid for
// `config`: BOS, filler, EOS; embeddings at its default pooling), each once
// untimed, since a first batch of a size took 1.2-2.6 times as long as the
// next (the set-up of its size, and the memory of a new largest batch),
// then timed: a batch under options.short_batch up to three times, the
// fastest kept, so that one pause does not make its size look slow. Stops
// before a batch predicted to take the calibration past options.budget, and
// estimates that one and the larger ones instead. An engine error names the
// batch and how to avoid it.
StatusOr<Calibration> RunCalibration(BatchEngine* engine, const EncoderConfig& config,
                                     const std::vector<CalibrationBatch>& batches,
                                     const CalibrationOptions& options = {});

}  // namespace encoderd::server
