// Overload control as pure functions of the queue, the clock and the
// throughput measured on this machine, consulted by the batcher like
// batch_policy.h (tests drive them with a fake clock): a call is admitted only
// when it is predicted to finish before its deadline (or, without one, to
// wait less than max_queue_time_us), so that under any overload the queue
// holds only work that can still succeed and the excess is refused at once.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "server/core/inference_request.h"

namespace encoderd::server {

// Tokens a second one executor of a model computes, learned from the batches
// it ran: exponentially weighted averages of a batch's tokens and seconds
// (their ratio weighs large batches by their size). Not thread-safe: the
// batcher guards it with its lock.
class ThroughputEstimate {
 public:
  // One batch of `tokens` took `duration`.
  void Observe(int64_t tokens, Clock::duration duration);
  // False until a batch was observed: nothing can be predicted.
  bool known() const { return seconds_ > 0 && tokens_ > 0; }
  double tokens_per_second() const { return known() ? tokens_ / seconds_ : 0; }
  // Tokens of a recent batch (the weighted average; 0 while unknown).
  int64_t batch_tokens() const { return static_cast<int64_t>(tokens_); }
  // Predicted time for one executor to compute `tokens` (zero while unknown).
  Clock::duration Predict(int64_t tokens) const;

 private:
  double tokens_ = 0;
  double seconds_ = 0;
};

struct AdmissionLimits {
  // Refuse a call whose predicted finish is after its deadline.
  bool predict_deadlines = true;
  // Refuse a call without a deadline whose predicted wait in the queue is
  // longer than this; 0: no limit.
  int64_t max_queue_time_us = 0;
};

// The work ahead of a new call.
struct Backlog {
  // Tokens waiting in the queue.
  int64_t queued_tokens = 0;
  // Tokens of the batches the executors are computing (half of it, on
  // average, is still to do).
  int64_t running_tokens = 0;
  // Executors sharing the work.
  int executors = 1;
};

// How long a new call is predicted to wait before its own batch starts. Its
// answer comes when the batch holding it ends, so the queue counts in whole
// batches of the recent size: the call waits for half of the running work and
// for the full batches queued before it; the tokens queued beyond those share
// its batch. (A prediction linear in the tokens ahead was up to one batch
// early, and calls admitted on it expired in the queue.)
Clock::duration PredictedWait(const Backlog& backlog, const ThroughputEstimate& estimate);

// When a call of `tokens` submitted at `now` is predicted to finish: after its
// wait, its own batch, which under load fills up to the recent batch size.
Clock::time_point PredictedFinish(const Backlog& backlog, int64_t tokens, Clock::time_point now,
                                  const ThroughputEstimate& estimate);

// OK, or RESOURCE_EXHAUSTED saying why (predicted finish against the
// deadline, or predicted wait against max_queue_time_us). Admits everything
// while the throughput is unknown.
Status Admit(const Backlog& backlog, int64_t tokens, Clock::time_point deadline,
             Clock::time_point now, const ThroughputEstimate& estimate,
             const AdmissionLimits& limits);

}  // namespace encoderd::server
