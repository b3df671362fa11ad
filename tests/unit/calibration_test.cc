// The throughput calibration a model runs as it loads (server/core/calibration.h):
// which batches it plans under each limit, and what it runs and reports.
#include "server/core/calibration.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <utility>
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
  // The defaults: 32, 128, 512 and 2,048 tokens in sequences of 128.
  EXPECT_EQ(
      Plan(Limits(8192, 256), 512),
      (Batches{{32, 32, 1, 32}, {128, 128, 1, 128}, {512, 128, 4, 128}, {2048, 128, 16, 128}}));
  // max_batch_tokens 300: 300 stands for the class of 256-1,023 tokens.
  EXPECT_EQ(Plan(Limits(300, 256), 512),
            (Batches{{32, 32, 1, 32}, {128, 128, 1, 128}, {300, 128, 3, 44}}));
  // max_batch_tokens 100: 32 and 100 (100 is in the class of 64-255).
  EXPECT_EQ(Plan(Limits(100, 256), 512), (Batches{{32, 32, 1, 32}, {100, 100, 1, 100}}));
  // Shorter sequences than 128 where the model takes fewer tokens.
  EXPECT_EQ(Plan(Limits(8192, 256), 16),
            (Batches{{32, 16, 2, 16}, {128, 16, 8, 16}, {512, 16, 32, 16}, {2048, 16, 128, 16}}));
  // Four sequences a batch: longer ones (512) reach 2,048 tokens.
  EXPECT_EQ(
      Plan(Limits(8192, 4), 512),
      (Batches{{32, 32, 1, 32}, {128, 128, 1, 128}, {512, 512, 1, 512}, {2048, 512, 4, 512}}));
  // One sequence of at most 16 tokens a batch: only the class of 1-63.
  EXPECT_EQ(Plan(Limits(8192, 1), 16), (Batches{{16, 16, 1, 16}}));
  // A huge max_batch_sequences does not overflow.
  EXPECT_EQ(Plan(Limits(8192, int64_t{1} << 62), 512).size(), 4u);
}

// Records the batches it runs (tokens, sequences, and whether every
// sequence opens with BOS and closes with EOS); fails from run `fail_at` on.
// Each run advances its clock by `per_run` and `per_token` a token.
class CountingEngine : public BatchEngine {
 public:
  StatusOr<std::vector<std::vector<float>>> Run(const PackedBatch& batch,
                                                const std::vector<OutputSpec>& specs,
                                                const std::function<bool()>&) override {
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
    clock += per_run + per_token * batch.num_tokens();
    return std::vector<std::vector<float>>(specs.size(), std::vector<float>{1.0f});
  }
  CalibrationOptions Options(Clock::duration budget, Clock::duration short_batch) {
    CalibrationOptions options;
    options.budget = budget;
    options.short_batch = short_batch;
    options.now = [this] { return clock; };
    return options;
  }
  int runs = 0;
  int fail_at = 1 << 30;
  std::vector<int64_t> tokens;
  std::vector<int64_t> sequences;
  Clock::time_point clock{};
  Clock::duration per_run{};
  Clock::duration per_token{};
};

EncoderConfig Config() {
  EncoderConfig config;
  config.vocab_size = 100;
  config.special_tokens.bos = 3;
  config.special_tokens.eos = 4;
  return config;
}

constexpr Clock::duration kNoLimit = Clock::duration::max();

TEST(CalibrationTest, RunsEachBatchUntimedThenTimesItAndNamesTheBatchThatFailed) {
  // Every timed run counts as short: each batch runs once untimed and three
  // times timed.
  CountingEngine engine;
  StatusOr<Calibration> calibration =
      RunCalibration(&engine, Config(), CalibrationBatches(Limits(8192, 256), 512),
                     engine.Options(kNoLimit, /*short_batch=*/kNoLimit));
  ASSERT_TRUE(calibration.ok()) << calibration.status().ToString();
  ASSERT_EQ(calibration->runs.size(), 4u);
  EXPECT_EQ(calibration->runs[0].tokens, 32);
  EXPECT_EQ(calibration->runs[3].tokens, 2048);
  EXPECT_TRUE(calibration->estimated.empty());
  EXPECT_EQ(engine.tokens, (std::vector<int64_t>{32, 32, 32, 32, 128, 128, 128, 128, 512, 512, 512,
                                                 512, 2048, 2048, 2048, 2048}));
  EXPECT_EQ(engine.sequences,
            (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 4, 4, 16, 16, 16, 16}));
  // None counts as short: once untimed, once timed.
  CountingEngine once;
  calibration = RunCalibration(&once, Config(), CalibrationBatches(Limits(8192, 256), 512),
                               once.Options(kNoLimit, Clock::duration::zero()));
  ASSERT_TRUE(calibration.ok()) << calibration.status().ToString();
  EXPECT_EQ(once.tokens, (std::vector<int64_t>{32, 32, 128, 128, 512, 512, 2048, 2048}));

  // max_batch_tokens 300: 3 sequences, the last of 44 tokens. Its timed run
  // fails: the error names the batch.
  CountingEngine failing;
  failing.fail_at = 6;  // 32 and 128 twice each, then 300 untimed
  calibration = RunCalibration(&failing, Config(), CalibrationBatches(Limits(300, 256), 512),
                               failing.Options(kNoLimit, Clock::duration::zero()));
  ASSERT_FALSE(calibration.ok());
  EXPECT_EQ(calibration.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(failing.sequences, (std::vector<int64_t>{1, 1, 1, 1, 3}));
  EXPECT_NE(calibration.status().message().find(
                "calibration batch of 300 tokens: 3 sequences of 128 (the last 44) (lower "
                "max_batch_tokens if the device cannot hold it): out of device memory"),
            std::string::npos)
      << calibration.status().message();
}

// The budget, on the engine's clock: 32 ms a run and 1 ms a token, each
// batch run twice (short_batch 0), predicted at the previous batch's time
// per token, 3.6 runs (an untimed run of 2.6 and a timed one):
//   32 tokens: 2 x 64 ms, 2 ms a token;
//   128: predicted 3.6 x 256 = 921.6 ms (1,049.6 with the 128 spent);
//     2 x 160 ms (448 spent), 1.25 ms a token;
//   512: predicted 3.6 x 640 = 2,304 ms (2,752); 2 x 544 ms (1,536),
//     1.0625 ms a token;
//   2,048: predicted 3.6 x 2,176 = 7,833.6 ms (9,369.6); 2 x 2,080 ms.
// A size left out is estimated at 1.25 x the last time per token.
TEST(CalibrationTest, LeavesOutTheBatchesPredictedToTakeItPastItsBudget) {
  const auto run_with = [](int64_t budget_ms, CountingEngine* engine) {
    engine->per_run = std::chrono::milliseconds(32);
    engine->per_token = std::chrono::milliseconds(1);
    StatusOr<Calibration> c = RunCalibration(
        engine, Config(), CalibrationBatches(Limits(8192, 256), 512),
        engine->Options(std::chrono::milliseconds(budget_ms), Clock::duration::zero()));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *c : Calibration{};
  };
  const auto estimates = [](const Calibration& c) {
    std::vector<std::pair<int64_t, double>> e;
    for (const CalibrationRun& run : c.estimated)
      e.push_back({run.tokens, std::chrono::duration<double, std::milli>(run.took).count()});
    return e;
  };
  const auto near = [](const std::vector<std::pair<int64_t, double>>& got,
                       const std::vector<std::pair<int64_t, double>>& want) {
    if (got.size() != want.size()) return false;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i].first != want[i].first || std::abs(got[i].second - want[i].second) > 1e-3)
        return false;
    return true;
  };
  // Everything fits 9.4 s. (At the first batch's 2 ms a token, 2,048 would
  // be predicted at 14.7 s.)
  CountingEngine all;
  Calibration c = run_with(9400, &all);
  EXPECT_EQ(all.tokens, (std::vector<int64_t>{32, 32, 128, 128, 512, 512, 2048, 2048}));
  EXPECT_EQ(c.runs.size(), 4u);
  EXPECT_TRUE(c.estimated.empty());
  // 2,048 does not fit 9.3 s: estimated at 1.25 x 1.0625 ms x 2,048.
  CountingEngine three;
  c = run_with(9300, &three);
  EXPECT_EQ(three.tokens, (std::vector<int64_t>{32, 32, 128, 128, 512, 512}));
  EXPECT_EQ(c.runs.size(), 3u);
  EXPECT_TRUE(near(estimates(c), {{2048, 2720}}));
  // 128 fits 1.1 s, 512 does not: 512 and 2,048 at 1.25 x 1.25 ms a token.
  CountingEngine two;
  c = run_with(1100, &two);
  EXPECT_EQ(two.tokens, (std::vector<int64_t>{32, 32, 128, 128}));
  EXPECT_TRUE(near(estimates(c), {{512, 800}, {2048, 3200}}));
  // The smallest batch always runs: a rate for every size.
  CountingEngine one;
  c = run_with(1, &one);
  EXPECT_EQ(one.tokens, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(c.runs.size(), 1u);
  EXPECT_TRUE(near(estimates(c), {{128, 320}, {512, 1280}, {2048, 5120}}));
}

}  // namespace
}  // namespace encoderd::server
