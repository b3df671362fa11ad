// The throughput calibration a model runs as it loads (server/core/calibration.h):
// which batches it plans under each limit, and what it runs and reports.
#include "server/core/calibration.h"

#include <gtest/gtest.h>

#include <vector>

namespace encoderd::server {
namespace {

BatchLimits Limits(int64_t tokens, int64_t sequences) {
  BatchLimits limits;
  limits.max_batch_tokens = tokens;
  limits.max_batch_sequences = sequences;
  return limits;
}

// tokens, length, sequences, last_length of each batch.
std::vector<std::vector<int64_t>> Plan(const BatchLimits& limits, int64_t max_tokens) {
  std::vector<std::vector<int64_t>> plan;
  for (const CalibrationBatch& b : CalibrationBatches(limits, max_tokens))
    plan.push_back({b.tokens, b.length, b.sequences, b.last_length});
  return plan;
}

TEST(CalibrationTest, PlansOneBatchPerSizeClassWithinTheBatchersLimits) {
  using Batches = std::vector<std::vector<int64_t>>;
  // The defaults: 2,048, 512, 128 and 32 tokens in sequences of 128.
  EXPECT_EQ(
      Plan(Limits(8192, 256), 512),
      (Batches{{2048, 128, 16, 128}, {512, 128, 4, 128}, {128, 128, 1, 128}, {32, 32, 1, 32}}));
  // max_batch_tokens 300: 300 stands for the class of 256-1,023 tokens.
  EXPECT_EQ(Plan(Limits(300, 256), 512),
            (Batches{{300, 128, 3, 44}, {128, 128, 1, 128}, {32, 32, 1, 32}}));
  // max_batch_tokens 100: 100 and 32 (100 is in the class of 64-255).
  EXPECT_EQ(Plan(Limits(100, 256), 512), (Batches{{100, 100, 1, 100}, {32, 32, 1, 32}}));
  // Shorter sequences than 128 where the model takes fewer tokens.
  EXPECT_EQ(Plan(Limits(8192, 256), 16),
            (Batches{{2048, 16, 128, 16}, {512, 16, 32, 16}, {128, 16, 8, 16}, {32, 16, 2, 16}}));
  // Four sequences a batch: longer ones (512) reach 2,048 tokens.
  EXPECT_EQ(
      Plan(Limits(8192, 4), 512),
      (Batches{{2048, 512, 4, 512}, {512, 512, 1, 512}, {128, 128, 1, 128}, {32, 32, 1, 32}}));
  // One sequence of at most 16 tokens a batch: only the class of 1-63.
  EXPECT_EQ(Plan(Limits(8192, 1), 16), (Batches{{16, 16, 1, 16}}));
  // A huge max_batch_sequences does not overflow.
  EXPECT_EQ(Plan(Limits(8192, int64_t{1} << 62), 512).size(), 4u);
}

// Records the batches it runs (tokens, sequences, and whether every
// sequence opens with BOS and closes with EOS); fails from run `fail_at` on.
class CountingEngine : public BatchEngine {
 public:
  StatusOr<std::vector<std::vector<float>>> Run(const PackedBatch& batch,
                                                const std::vector<OutputSpec>& specs) override {
    if (++runs >= fail_at) return ResourceExhausted("out of device memory");
    tokens.push_back(batch.num_tokens());
    sequences.push_back(batch.num_sequences());
    EXPECT_EQ(static_cast<int64_t>(specs.size()), batch.num_sequences());
    for (int64_t i = 0; i < batch.num_sequences(); ++i) {
      EXPECT_EQ(batch.token_ids[batch.cu_seqlens[i]], 3);
      if (batch.length(i) > 1) {
        EXPECT_EQ(batch.token_ids[batch.cu_seqlens[i + 1] - 1], 4);
      }
    }
    return std::vector<std::vector<float>>(specs.size(), std::vector<float>{1.0f});
  }
  int runs = 0;
  int fail_at = 1 << 30;
  std::vector<int64_t> tokens;
  std::vector<int64_t> sequences;
};

EncoderConfig Config() {
  EncoderConfig config;
  config.vocab_size = 100;
  config.special_tokens.bos = 3;
  config.special_tokens.eos = 4;
  return config;
}

TEST(CalibrationTest, RunsEachBatchUntimedThenTimesItAndNamesTheBatchThatFailed) {
  // Every timed run counts as short: each batch runs once untimed and three
  // times timed.
  const Clock::duration always_short = Clock::duration::max();
  CountingEngine engine;
  StatusOr<std::vector<CalibrationRun>> runs =
      RunCalibration(&engine, Config(), CalibrationBatches(Limits(8192, 256), 512), always_short);
  ASSERT_TRUE(runs.ok()) << runs.status().ToString();
  ASSERT_EQ(runs->size(), 4u);
  EXPECT_EQ((*runs)[0].tokens, 2048);
  EXPECT_EQ((*runs)[3].tokens, 32);
  EXPECT_EQ(engine.tokens, (std::vector<int64_t>{2048, 2048, 2048, 2048, 512, 512, 512, 512, 128,
                                                 128, 128, 128, 32, 32, 32, 32}));
  EXPECT_EQ(engine.sequences,
            (std::vector<int64_t>{16, 16, 16, 16, 4, 4, 4, 4, 1, 1, 1, 1, 1, 1, 1, 1}));
  // None counts as short: once untimed, once timed.
  CountingEngine once;
  runs = RunCalibration(&once, Config(), CalibrationBatches(Limits(8192, 256), 512),
                        Clock::duration::zero());
  ASSERT_TRUE(runs.ok()) << runs.status().ToString();
  EXPECT_EQ(once.tokens, (std::vector<int64_t>{2048, 2048, 512, 512, 128, 128, 32, 32}));

  // max_batch_tokens 300: 3 sequences, the last of 44 tokens. Its timed run
  // fails: the error names the batch.
  CountingEngine failing;
  failing.fail_at = 2;
  runs =
      RunCalibration(&failing, Config(), CalibrationBatches(Limits(300, 256), 512), always_short);
  ASSERT_FALSE(runs.ok());
  EXPECT_EQ(runs.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(failing.sequences, (std::vector<int64_t>{3}));
  EXPECT_NE(runs.status().message().find(
                "calibration batch of 300 tokens: 3 sequences of 128 (the last 44) (lower "
                "max_batch_tokens if the device cannot hold it): out of device memory"),
            std::string::npos)
      << runs.status().message();
}

}  // namespace
}  // namespace encoderd::server
