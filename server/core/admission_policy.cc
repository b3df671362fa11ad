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

Clock::duration PredictedWait(const Backlog& backlog, const ThroughputEstimate& estimate) {
  const int64_t batch = std::max<int64_t>(estimate.batch_tokens(), 1);
  const int64_t full_batches_queued = backlog.queued_tokens / batch * batch;
  const int64_t ahead = full_batches_queued + backlog.running_tokens / 2;
  return estimate.Predict(ahead / std::max(backlog.executors, 1));
}

Clock::time_point PredictedFinish(const Backlog& backlog, int64_t tokens, Clock::time_point now,
                                  const ThroughputEstimate& estimate) {
  return now + PredictedWait(backlog, estimate) +
         estimate.Predict(std::max(estimate.batch_tokens(), tokens));
}

Status Admit(const Backlog& backlog, int64_t tokens, Clock::time_point deadline,
             Clock::time_point now, const ThroughputEstimate& estimate,
             const AdmissionLimits& limits) {
  if (!estimate.known()) return Status::Ok();
  const Clock::time_point finish = PredictedFinish(backlog, tokens, now, estimate);
  // Built only for a refusal: admitting costs no strings.
  const auto backlog_text = [&] {
    return std::to_string(backlog.queued_tokens) + " tokens queued, " +
           std::to_string(backlog.running_tokens) + " running, at " +
           std::to_string(static_cast<int64_t>(estimate.tokens_per_second())) + " tokens/s";
  };
  if (deadline != Clock::time_point::max()) {
    if (limits.predict_deadlines && finish > deadline) {
      return ResourceExhausted(
          "overloaded: the call would finish in " + std::to_string(Millis(finish - now)) +
          " ms, after its deadline in " + std::to_string(Millis(deadline - now)) + " ms (" +
          backlog_text() + "); retry later or with a longer deadline");
    }
    return Status::Ok();
  }
  const Clock::duration wait = PredictedWait(backlog, estimate);
  if (limits.max_queue_time_us > 0 && wait > std::chrono::microseconds(limits.max_queue_time_us)) {
    return ResourceExhausted("overloaded: the call would wait " + std::to_string(Millis(wait)) +
                             " ms in the queue, more than max_queue_time_us allows (" +
                             backlog_text() + "); retry later");
  }
  return Status::Ok();
}

}  // namespace encoderd::server
