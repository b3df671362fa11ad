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

// Counts the batches it runs and their sequences; fails from `fail_at` on.
class CountingEngine : public BatchEngine {
 public:
  StatusOr<std::vector<std::vector<float>>> Run(const PackedBatch& batch,
                                                const std::vector<OutputSpec>& specs) override {
    if (++runs >= fail_at) return ResourceExhausted("out of device memory");
    tokens.push_back(batch.num_tokens());
    EXPECT_EQ(static_cast<int64_t>(specs.size()), batch.num_sequences());
    first_ids.push_back(batch.token_ids.front());
    return std::vector<std::vector<float>>(specs.size(), std::vector<float>{1.0f});
  }
  int runs = 0;
  int fail_at = 1 << 30;
  std::vector<int64_t> tokens;
  std::vector<int32_t> first_ids;
};

TEST(CalibrationTest, RunsEachBatchUntimedThenTimesItAndNamesTheBatchThatFailed) {
  EncoderConfig config;
  config.vocab_size = 100;
  config.special_tokens.bos = 3;
  config.special_tokens.eos = 4;
  const std::vector<CalibrationBatch> batches = CalibrationBatches(Limits(8192, 256), 512);
  CountingEngine engine;
  StatusOr<std::vector<CalibrationRun>> runs = RunCalibration(&engine, config, batches);
  ASSERT_TRUE(runs.ok()) << runs.status().ToString();
  ASSERT_EQ(runs->size(), 4u);
  EXPECT_EQ((*runs)[0].tokens, 2048);
  EXPECT_EQ((*runs)[3].tokens, 32);
  // The fake engine takes microseconds: each batch runs once untimed and
  // three times timed.
  EXPECT_EQ(engine.tokens, (std::vector<int64_t>{2048, 2048, 2048, 2048, 512, 512, 512, 512, 128,
                                                 128, 128, 128, 32, 32, 32, 32}));
  for (int32_t id : engine.first_ids) EXPECT_EQ(id, 3);  // each sequence opens with BOS
  for (const CalibrationRun& run : *runs) EXPECT_GT(run.took.count(), 0);

  CountingEngine failing;
  failing.fail_at = 5;  // the 512-token batch's untimed run
  runs = RunCalibration(&failing, config, batches);
  ASSERT_FALSE(runs.ok());
  EXPECT_EQ(runs.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(runs.status().message().find("calibration batch of 512 tokens: 4 sequences of 128 "
                                         "(lower max_batch_tokens if the device cannot hold it)"),
            std::string::npos)
      << runs.status().message();
}

}  // namespace
}  // namespace encoderd::server
