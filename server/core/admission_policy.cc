#include "server/core/admission_policy.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace encoderd::server {
namespace {

// Weight of the newest batch in the averages: about the last 10 batches count.
constexpr double kNewest = 0.1;

int64_t Millis(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

void ThroughputEstimate::Observe(int64_t tokens, Clock::duration duration) {
  const double seconds = std::chrono::duration<double>(duration).count();
  if (tokens <= 0 || seconds <= 0) return;
  if (!known()) {
    tokens_ = static_cast<double>(tokens);
    seconds_ = seconds;
    return;
  }
  tokens_ += kNewest * (static_cast<double>(tokens) - tokens_);
  seconds_ += kNewest * (seconds - seconds_);
}

Clock::duration ThroughputEstimate::Predict(int64_t tokens) const {
  if (!known() || tokens <= 0) return Clock::duration::zero();
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(static_cast<double>(tokens) * seconds_ / tokens_));
}

void StandingQueue::ObserveBatch(Clock::duration newest_wait, Clock::duration target,
                                 Clock::time_point now) {
  if (newest_wait <= target) {
    above_since_ = Clock::time_point::max();
    return;
  }
  if (above_since_ == Clock::time_point::max()) above_since_ = now;
  if (now - above_since_ >= kInterval) standing_ = true;
}

void StandingQueue::ObserveIdle() {
  above_since_ = Clock::time_point::max();
  standing_ = false;
}

Clock::duration OverloadQueueTime(const AdmissionLimits& limits,
                                  const ThroughputEstimate& estimate) {
  return std::max<Clock::duration>(std::chrono::microseconds(limits.overload_queue_time_us),
                                   estimate.Predict(estimate.batch_tokens()));
}

namespace {

// Tokens of the batch a new call would ride in (see PredictedFinish), and
// whether it starts at once (an executor is free and no full batch is queued).
struct OwnBatch {
  int64_t full_batches_queued = 0;
  int64_t tokens = 0;
  bool starts_now = false;
};

OwnBatch PlanOwnBatch(const Backlog& backlog, int64_t tokens, const ThroughputEstimate& estimate) {
  const int64_t batch = std::max<int64_t>(estimate.batch_tokens(), 1);
  OwnBatch own;
  own.full_batches_queued = backlog.queued_tokens / batch * batch;
  own.starts_now = backlog.idle_executors > 0 && own.full_batches_queued == 0;
  own.tokens = own.starts_now ? backlog.queued_tokens + tokens : std::max(batch, tokens);
  return own;
}

}  // namespace

namespace {

// The wait before a call's own batch starts, and that batch's duration.
struct Prediction {
  Clock::duration wait{};
  Clock::duration own_batch{};
};

Prediction PredictCall(const Backlog& backlog, int64_t tokens, const ThroughputEstimate& estimate) {
  const OwnBatch own = PlanOwnBatch(backlog, tokens, estimate);
  Prediction p;
  p.own_batch = estimate.Predict(own.tokens);
  if (!own.starts_now) {
    const int64_t ahead = own.full_batches_queued + backlog.running_tokens / 2;
    p.wait = estimate.Predict(ahead / std::max(backlog.executors, 1));
  }
  return p;
}

}  // namespace

Clock::duration PredictedWait(const Backlog& backlog, const ThroughputEstimate& estimate) {
  return PredictCall(backlog, 0, estimate).wait;
}

Clock::time_point PredictedFinish(const Backlog& backlog, int64_t tokens, Clock::time_point now,
                                  const ThroughputEstimate& estimate) {
  const Prediction p = PredictCall(backlog, tokens, estimate);
  return now + p.wait + p.own_batch;
}

Status Admit(const Backlog& backlog, int64_t tokens, Clock::time_point deadline,
             Clock::time_point now, const ThroughputEstimate& estimate,
             const AdmissionLimits& limits, Refusal* refusal) {
  Refusal ignored;
  Refusal& why = refusal != nullptr ? *refusal : ignored;
  why = Refusal::kNone;
  if (!estimate.known()) return Status::Ok();
  // Planned once: this runs for every call, under the batcher's lock.
  const Prediction predicted = PredictCall(backlog, tokens, estimate);
  const Clock::duration wait = predicted.wait;
  const Clock::time_point finish = now + wait + predicted.own_batch;
  // Built only for a refusal: admitting costs no strings.
  const auto backlog_text = [&] {
    return std::to_string(backlog.queued_tokens) + " tokens queued ahead, " +
           std::to_string(backlog.running_tokens) + " running, at " +
           std::to_string(static_cast<int64_t>(estimate.tokens_per_second())) + " tokens/s";
  };
  if (backlog.standing && limits.overload_queue_time_us > 0) {
    const Clock::duration longest = OverloadQueueTime(limits, estimate);
    if (wait > longest) {
      why = Refusal::kStandingQueue;
      return ResourceExhausted(
          "overloaded: the call would wait " + std::to_string(Millis(wait)) +
          " ms in a queue that has stood for over " +
          std::to_string(Millis(StandingQueue::kInterval)) + " ms; under sustained overload " +
          "calls wait at most " + std::to_string(Millis(longest)) +
          " ms (overload_queue_time_us, or one batch) (" + backlog_text() + "); retry later");
    }
  }
  if (deadline != Clock::time_point::max()) {
    if (limits.predict_deadlines && finish > deadline) {
      why = Refusal::kPredictedLate;
      return ResourceExhausted(
          "overloaded: the call would finish in " + std::to_string(Millis(finish - now)) +
          " ms, after its deadline in " + std::to_string(Millis(deadline - now)) + " ms (" +
          backlog_text() + "); retry later or with a longer deadline");
    }
    return Status::Ok();
  }
  if (limits.max_queue_time_us > 0 && wait > std::chrono::microseconds(limits.max_queue_time_us)) {
    why = Refusal::kQueueTime;
    return ResourceExhausted("overloaded: the call would wait " + std::to_string(Millis(wait)) +
                             " ms in the queue, more than max_queue_time_us allows (" +
                             backlog_text() + "); retry later");
  }
  return Status::Ok();
}

}  // namespace encoderd::server
