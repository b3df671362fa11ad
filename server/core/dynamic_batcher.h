// Per model: a bounded request queue, ONE batcher thread that owns it and
// forms batches with FormBatch (batch_policy.h), and one executor thread per
// engine replica. Handlers Submit() requests and wait on request->done().
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/core/batch_engine.h"
#include "server/core/batch_executor.h"
#include "server/core/batch_policy.h"
#include "server/metrics/serving_metrics.h"

namespace encoderd::server {

class DynamicBatcher {
 public:
  // Starts the threads. Takes ownership of the replicas (at least one).
  // `metrics` (may be null; must outlive Stop()) receives every batch under
  // the label `model`.
  DynamicBatcher(BatchLimits limits, PackingRule rule,
                 std::vector<std::unique_ptr<BatchEngine>> replicas,
                 ServingMetrics* metrics = nullptr, std::string model = "");
  // Stop()s.
  ~DynamicBatcher();
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // Any thread. DEADLINE_EXCEEDED without queuing when the request's deadline
  // has passed (counted as a drop, deadline_before_queue); RESOURCE_EXHAUSTED
  // at once when the queue is full, or when Admit (admission_policy.h)
  // predicts the request would finish after its deadline or wait too long,
  // behind the queued work that goes before it (RequestQueue::TokensAhead)
  // (counted as refused_predicted_late / refused_queue_time); UNAVAILABLE
  // once stopped. On OK the request will finish (done()).
  Status Submit(std::shared_ptr<InferenceRequest> request);

  // Any thread, before calls come: a batch of `tokens` took `took` on one of
  // the replicas (ThroughputEstimate::Calibrate), so that the calls are
  // admitted on rates measured for each size of batch from the first.
  void Calibrate(int64_t tokens, Clock::duration took);

  // Any thread, before a call of `peer` is tokenized: Admit with its own
  // tokens not known yet (counted as none), so that a call the queue would
  // refuse is refused before its tokenization costs anything. Counted as
  // Submit's refusals are. `calls_before_queue`: calls admitted earlier that
  // have not reached the queue yet, counted as queued ahead of this one at
  // the tokens of recent requests (RecentCallTokens::PerCall).
  Status Precheck(Clock::time_point deadline, uint64_t peer = 0, int64_t calls_before_queue = 0);

  // Any thread, for a request Submit() accepted whose caller stops waiting:
  // finishes it with `status` (CANCELLED or DEADLINE_EXCEEDED) unless it
  // finished already, counts the drop (in queue, or while running: its
  // results are then discarded) and wakes the batcher thread, which removes
  // a queued request from the queue at once. False when it had finished.
  bool Abandon(const std::shared_ptr<InferenceRequest>& request, const Status& status);

  // Finishes the batches already running, fails every queued request with
  // UNAVAILABLE and joins the threads. Idempotent.
  void Stop();

  // Any thread: requests waiting in the queue now.
  size_t queue_depth() const;
  // Any thread: whether the queue stands now (StandingQueue: sustained
  // overload, calls refused beyond a short wait).
  bool standing() const;
  // Any thread: the pace deadlines are judged at for each size class of
  // batch (ThroughputEstimate::slow_factor, SizeClassFirst).
  std::array<double, ThroughputEstimate::kSizeClasses> slow_paces() const;

  // Any thread, without waiting for the batcher's lock: the server refused a
  // call for want of a slot (max_concurrent_requests, or its connection's
  // share of them): the calls outgrew what it accepts
  // (StandingQueue::ObserveOverflow, at the next batch formed).
  void ObserveOverflow();

 private:
  // DEADLINE_EXCEEDED for a passed deadline (counted), UNAVAILABLE once
  // stopping, then Admit against the current backlog and
  // `tokens_before_queue` more (a refusal counted). Requires mu_.
  Status AdmitLocked(int64_t tokens, Clock::time_point deadline, uint64_t peer,
                     int64_t tokens_before_queue = 0);
  void BatcherLoop();
  // Feeds standing_ with the batch just formed (under mu_).
  void ObserveQueue(const BatchPlan& batch, Clock::time_point now);
  void ExecutorLoop(BatchEngine* engine);
  // Fails each dropped request unless it finished already, counting the drop.
  // Call without mu_.
  void FailDropped(const DroppedRequests& dropped);
  // The drop reason of a request failed with `code` (by its dispatched flag).
  void CountDrop(const InferenceRequest& request, StatusCode code);

  const BatchLimits limits_;
  const PackingRule rule_;
  std::vector<std::unique_ptr<BatchEngine>> replicas_;
  ServingMetrics* const metrics_;
  const std::string model_;

  mutable std::mutex mu_;
  std::condition_variable batcher_cv_;   // work arrived or an executor freed up
  std::condition_variable executor_cv_;  // a batch is ready
  RequestQueue queue_;                   // guarded by mu_
  std::deque<BatchPlan> ready_;          // guarded by mu_; at most idle_ entries
  int idle_ = 0;                         // executors without a batch; guarded by mu_
  bool stopping_ = false;                // guarded by mu_
  ThroughputEstimate estimate_;          // guarded by mu_; updated by the executors
  int64_t running_tokens_ = 0;           // tokens of batches ready or running; guarded by mu_
  RecentCallTokens recent_calls_;        // of the requests admitted; guarded by mu_
  StandingQueue standing_;               // guarded by mu_; fed by BatcherLoop and AdmitLocked
  // When ObserveOverflow last ran (Clock ticks since its epoch), read by
  // ObserveQueue.
  static constexpr Clock::rep kNeverRefused = std::numeric_limits<Clock::rep>::min();
  std::atomic<Clock::rep> slot_refused_at_{kNeverRefused};
  std::vector<std::thread> threads_;
};

}  // namespace encoderd::server
