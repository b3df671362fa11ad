// Overload control (server/core/admission_policy.h) on a fake clock: the measured
// throughput, admission against the predicted finish and queue time, and
// FormBatch dropping what cannot finish before its deadline.
#include "server/core/admission_policy.h"

#include <gtest/gtest.h>

#include <chrono>

#include "server/core/batch_policy.h"

namespace encoderd::server {
namespace {

using std::chrono::milliseconds;

const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);
const Clock::time_point kNever = Clock::time_point::max();

std::shared_ptr<InferenceRequest> MakeRequest(uint64_t id, int tokens, Clock::time_point deadline) {
  return std::make_shared<InferenceRequest>(
      id, std::vector<std::vector<int32_t>>{std::vector<int32_t>(tokens, 7)}, OutputSpec{}, kT0,
      deadline);
}

// 10,000 tokens a second: 1,000 tokens in 100 ms.
ThroughputEstimate TenThousandPerSecond() {
  ThroughputEstimate e;
  e.Observe(1000, milliseconds(100));
  return e;
}

void ExpectRefused(const Status& s, const std::string& part) {
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
}

TEST(ThroughputEstimateTest, LearnsTokensPerSecondFromBatches) {
  ThroughputEstimate e;
  EXPECT_FALSE(e.known());
  EXPECT_EQ(e.Predict(1000), Clock::duration::zero());
  e.Observe(0, milliseconds(5));  // an empty batch says nothing
  EXPECT_FALSE(e.known());
  e = TenThousandPerSecond();
  EXPECT_DOUBLE_EQ(e.tokens_per_second(), 10000);
  EXPECT_EQ(e.Predict(500), milliseconds(50));
  // The newest batch weighs 0.1: tokens stay 1,000, seconds 0.1 -> 0.11.
  e.Observe(1000, milliseconds(200));
  EXPECT_NEAR(e.tokens_per_second(), 1000 / 0.11, 1e-6);
}

TEST(AdmissionTest, AdmitsEverythingWhileTheThroughputIsUnknown) {
  const Backlog huge{1 << 30, 1 << 30, 1};
  AdmissionLimits limits;
  limits.max_queue_time_us = 1;
  EXPECT_TRUE(Admit(huge, 100, kT0 + milliseconds(1), kT0, ThroughputEstimate{}, limits).ok());
  EXPECT_TRUE(Admit(huge, 100, kNever, kT0, ThroughputEstimate{}, limits).ok());
}

TEST(AdmissionTest, RefusesACallPredictedToFinishAfterItsDeadline) {
  const ThroughputEstimate e = TenThousandPerSecond();
  // 5,000 queued + half of 2,000 running = 600 ms ahead, then 10 ms of its own.
  const Backlog backlog{5000, 2000, 1};
  EXPECT_EQ(PredictedFinish(backlog, 100, kT0, e), kT0 + milliseconds(610));
  const AdmissionLimits limits;
  ExpectRefused(Admit(backlog, 100, kT0 + milliseconds(500), kT0, e, limits),
                "would finish in 610 ms, after its deadline in 500 ms (5000 tokens queued, 2000 "
                "running, at 10000 tokens/s)");
  EXPECT_TRUE(Admit(backlog, 100, kT0 + milliseconds(610), kT0, e, limits).ok());
  // Two executors share what is ahead: 300 + 10 ms.
  EXPECT_TRUE(Admit({5000, 2000, 2}, 100, kT0 + milliseconds(500), kT0, e, limits).ok());
  // Off: only the queue's capacity refuses.
  AdmissionLimits off;
  off.predict_deadlines = false;
  EXPECT_TRUE(Admit(backlog, 100, kT0 + milliseconds(1), kT0, e, off).ok());
}

TEST(AdmissionTest, RefusesACallWithoutDeadlinePredictedToWaitTooLong) {
  const ThroughputEstimate e = TenThousandPerSecond();
  const Backlog backlog{5000, 2000, 1};  // 600 ms of waiting
  AdmissionLimits limits;
  limits.max_queue_time_us = 500000;
  ExpectRefused(Admit(backlog, 100, kNever, kT0, e, limits),
                "would wait 600 ms in the queue, more than max_queue_time_us allows");
  limits.max_queue_time_us = 600000;
  EXPECT_TRUE(Admit(backlog, 100, kNever, kT0, e, limits).ok());
  limits.max_queue_time_us = 0;  // no limit
  EXPECT_TRUE(Admit({1 << 30, 0, 1}, 100, kNever, kT0, e, limits).ok());
}

TEST(AdmissionTest, FormBatchNeverComputesWhatWouldFinishLate) {
  const ThroughputEstimate e = TenThousandPerSecond();
  BatchLimits limits;
  limits.max_batch_tokens = 1500;
  limits.max_queue_delay_us = 0;
  RequestQueue q(10);
  // 3,000 tokens queued: the next batch (1,500 tokens) takes 150 ms.
  ASSERT_TRUE(q.Push(MakeRequest(1, 1000, kT0 + milliseconds(100))).ok());  // cannot finish
  ASSERT_TRUE(q.Push(MakeRequest(2, 1000, kT0 + milliseconds(151))).ok());
  ASSERT_TRUE(q.Push(MakeRequest(3, 1000, kNever)).ok());
  EXPECT_EQ(q.QueuedTokens(), 3000);
  BatchDecision d = FormBatch(&q, limits, kT0, &e);
  ASSERT_EQ(d.dropped.size(), 1u);
  EXPECT_EQ(d.dropped[0].first->id(), 1u);
  EXPECT_EQ(d.dropped[0].second.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(d.dropped[0].second.message().find("would pass before the request could be computed"),
            std::string::npos);
  ASSERT_EQ(d.batch.slices.size(), 1u);  // 2 fits the budget alone; 3 waits
  EXPECT_EQ(d.batch.slices[0].request->id(), 2u);
  EXPECT_EQ(q.QueuedTokens(), 1000);

  // Without an estimate (or with prediction off) nothing is dropped early.
  RequestQueue q2(10);
  ASSERT_TRUE(q2.Push(MakeRequest(4, 1000, kT0 + milliseconds(1))).ok());
  EXPECT_TRUE(FormBatch(&q2, limits, kT0, nullptr).dropped.empty());
}

}  // namespace
}  // namespace encoderd::server
