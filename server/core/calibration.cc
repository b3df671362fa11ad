#include "server/core/calibration.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "server/core/admission_policy.h"

namespace encoderd::server {
namespace {

// The largest batch timed: larger ones take its rate, where a batch's fixed
// cost is a small part of its time (4,096 more would double the time
// calibration adds to loading: about 3 s for a BERT-base in fp32 on 2 vCPUs).
constexpr int64_t kLargest = 2048;
constexpr int64_t kLength = 128;
// A first run of a size took up to 2.6 times as long as the next (the
// untimed run; RunCalibration): a batch's prediction against the budget is
// that and its timed runs.
constexpr double kUntimedRun = 2.6;
// A size left out is given the largest timed size's time per token times
// this: per token, larger batches took up to 7% longer than smaller ones (a
// BERT-base on 2 vCPUs: 512 tokens against 128), and a rate too fast admits
// calls that finish late.
constexpr double kEstimateMargin = 1.25;

std::string Describe(const CalibrationBatch& batch) {
  return std::to_string(batch.tokens) + " tokens: " + std::to_string(batch.sequences) +
         " sequences of " + std::to_string(batch.length) +
         (batch.last_length != batch.length
              ? " (the last " + std::to_string(batch.last_length) + ")"
              : "");
}

}  // namespace

std::vector<CalibrationBatch> CalibrationBatches(const BatchLimits& limits, int64_t max_tokens) {
  const int64_t longest = std::max<int64_t>(max_tokens, 1);
  // Sequences per batch, held to what a size could ever need.
  const int64_t sequences = std::clamp<int64_t>(limits.max_batch_sequences, 1, kLargest);
  const int64_t length =
      std::min(longest, std::max(kLength, (kLargest + sequences - 1) / sequences));
  const int64_t largest =
      std::min({kLargest, std::max<int64_t>(limits.max_batch_tokens, 1), length * sequences});
  std::vector<CalibrationBatch> batches;
  int last_class = -1;
  for (int c = 0; c + 1 < ThroughputEstimate::kSizeClasses; ++c) {
    const int64_t wanted = c == 0 ? 32 : ThroughputEstimate::SizeClassFirst(c) * 2;
    const int64_t tokens = std::min(wanted, largest);
    const int size_class = ThroughputEstimate::SizeClass(tokens);
    if (size_class <= last_class) break;  // held to the largest, already planned
    last_class = size_class;
    CalibrationBatch batch;
    batch.tokens = tokens;
    batch.length = std::min(length, tokens);
    batch.sequences = (tokens + batch.length - 1) / batch.length;
    batch.last_length = tokens - (batch.sequences - 1) * batch.length;
    batches.push_back(batch);
  }
  return batches;
}

StatusOr<Calibration> RunCalibration(BatchEngine* engine, const EncoderConfig& config,
                                     const std::vector<CalibrationBatch>& batches,
                                     const CalibrationOptions& options) {
  const SpecialTokens& special = config.special_tokens;
  const auto filler = static_cast<int32_t>(config.vocab_size / 2);
  Calibration calibration;
  const Clock::time_point start = options.now();
  double seconds_per_token = 0;  // the last batch's
  const double short_batch = Seconds(options.short_batch);
  for (const CalibrationBatch& planned : batches) {
    const double run = seconds_per_token * static_cast<double>(planned.tokens);
    const double predicted = (kUntimedRun + (run < short_batch ? 3 : 1)) * run;
    if (!calibration.estimated.empty() ||
        Seconds(options.now() - start) + predicted > Seconds(options.budget)) {
      calibration.estimated.push_back({planned.tokens, FromSeconds(kEstimateMargin * run)});
      continue;
    }
    PackedBatchBuilder builder(config.position_rule, static_cast<int32_t>(config.pad_token_id));
    std::vector<OutputSpec> specs;
    for (int64_t s = 0; s < planned.sequences; ++s) {
      const int64_t length = s + 1 == planned.sequences ? planned.last_length : planned.length;
      std::vector<int32_t> ids(static_cast<size_t>(length), filler);
      ids.front() = special.bos;
      if (ids.size() > 1) ids.back() = special.eos;
      RETURN_IF_ERROR(builder.Add(ids, {}, {0, static_cast<int32_t>(s)}));
      specs.push_back({OutputKind::kEmbedding, config.default_pooling, false});
    }
    const PackedBatch batch = builder.Build();
    const auto time = [&]() -> StatusOr<Clock::duration> {
      const Clock::time_point began = options.now();
      StatusOr<std::vector<std::vector<float>>> outputs = engine->Run(batch, specs, {});
      const Clock::duration took = options.now() - began;
      if (!outputs.ok())
        return outputs.status().WithContext(
            "calibration batch of " + Describe(planned) +
            " (lower max_batch_tokens if the device cannot hold it)");
      if (outputs->size() != specs.size())
        return Internal("calibration batch of " + Describe(planned) + ": " +
                        std::to_string(outputs->size()) + " results for " +
                        std::to_string(specs.size()) + " sequences");
      return took;
    };
    RETURN_IF_ERROR(time().status());
    ASSIGN_OR_RETURN(Clock::duration fastest, time());
    for (int more = 0; more < 2 && fastest < options.short_batch; ++more) {
      ASSIGN_OR_RETURN(Clock::duration again, time());
      fastest = std::min(fastest, again);
    }
    calibration.runs.push_back({planned.tokens, fastest});
    seconds_per_token = Seconds(fastest) / static_cast<double>(planned.tokens);
  }
  return calibration;
}

}  // namespace encoderd::server
