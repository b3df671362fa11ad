#include "server/core/dynamic_batcher.h"

#include <algorithm>
#include <utility>

namespace encoderd::server {

DynamicBatcher::DynamicBatcher(BatchLimits limits, PackingRule rule,
                               std::vector<std::unique_ptr<BatchEngine>> replicas,
                               ServingMetrics* metrics, std::string model)
    : limits_(limits),
      rule_(rule),
      replicas_(std::move(replicas)),
      metrics_(metrics),
      model_(std::move(model)),
      queue_(limits.max_queue_size, limits.fair_queuing),
      idle_(static_cast<int>(replicas_.size())) {
  threads_.emplace_back([this] { BatcherLoop(); });
  for (auto& engine : replicas_) {
    BatchEngine* e = engine.get();
    threads_.emplace_back([this, e] { ExecutorLoop(e); });
  }
}

DynamicBatcher::~DynamicBatcher() { Stop(); }

Status DynamicBatcher::Submit(std::shared_ptr<InferenceRequest> request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A refused request is finished (its drop counted here, no callback):
    // gRPC cancels a call whose deadline passed, and the Abandon that
    // follows must neither fail it again nor count a second drop.
    const auto refuse = [&request](Status why) {
      request->Fail(why, /*notify=*/false);
      return why;
    };
    const int64_t tokens = request->TokensFrom(0);
    if (Status admitted = AdmitLocked(tokens, request->deadline(), request->peer); !admitted.ok())
      return refuse(std::move(admitted));
    if (Status pushed = queue_.Push(request); !pushed.ok()) {
      // max_queue_size: the calls outgrew what the server accepts.
      standing_.ObserveOverflow(Clock::now());
      if (metrics_) metrics_->ObserveDrop(model_, DropReason::kRefusedQueueFull);
      return refuse(std::move(pushed));
    }
    recent_calls_.Add(tokens);
  }
  if (metrics_) metrics_->ObserveAdmitted(model_);
  batcher_cv_.notify_one();
  return Status::Ok();
}

void DynamicBatcher::Calibrate(int64_t tokens, Clock::duration took) {
  std::lock_guard<std::mutex> lock(mu_);
  estimate_.Calibrate(tokens, took);
}

Status DynamicBatcher::Precheck(Clock::time_point deadline, uint64_t peer,
                                int64_t calls_before_queue) {
  std::lock_guard<std::mutex> lock(mu_);
  return AdmitLocked(
      0, deadline, peer,
      static_cast<int64_t>(static_cast<double>(calls_before_queue) * recent_calls_.PerCall()));
}

Status DynamicBatcher::AdmitLocked(int64_t tokens, Clock::time_point deadline, uint64_t peer,
                                   int64_t tokens_before_queue) {
  const Clock::time_point now = Clock::now();
  if (deadline <= now) {
    if (metrics_) metrics_->ObserveDrop(model_, DropReason::kDeadlineBeforeQueue);
    return DeadlineExceeded("the deadline passed before the request was queued");
  }
  if (stopping_) return Unavailable("the server is shutting down");
  const Backlog backlog{queue_.TokensAhead(peer) + tokens_before_queue,
                        running_tokens_,
                        static_cast<int>(replicas_.size()),
                        idle_,
                        standing_.standing(),
                        BatchTokenCap(limits_, &estimate_),
                        standing_.limit()};
  AdmitVerdict verdict;
  Status admitted = Admit(backlog, tokens, deadline, now, estimate_, limits_.admission, &verdict);
  if (verdict.shows_overload) standing_.ObserveOverflow(now);
  if (!admitted.ok() && metrics_) {
    const Refusal why = verdict.refusal;
    metrics_->ObserveDrop(model_, why == Refusal::kStandingQueue ? DropReason::kRefusedStandingQueue
                                  : why == Refusal::kQueueTime   ? DropReason::kRefusedQueueTime
                                                               : DropReason::kRefusedPredictedLate);
  }
  return admitted;
}

bool DynamicBatcher::Abandon(const std::shared_ptr<InferenceRequest>& request,
                             const Status& status) {
  {
    // Under mu_, so that FormBatch either sees the request finished (and
    // drops it unpacked) or has already marked it dispatched.
    std::lock_guard<std::mutex> lock(mu_);
    if (!request->Fail(status, /*notify=*/false)) return false;
    CountDrop(*request, status.code());
  }
  request->NotifyFinished();  // outside mu_: the callback may answer the call
  batcher_cv_.notify_one();
  return true;
}

void DynamicBatcher::FailDropped(const DroppedRequests& dropped) {
  for (const auto& [request, status] : dropped)
    if (request->Fail(status)) CountDrop(*request, status.code());
}

void DynamicBatcher::CountDrop(const InferenceRequest& request, StatusCode code) {
  if (!metrics_) return;
  const bool running = request.dispatched();
  if (code == StatusCode::kCancelled) {
    metrics_->ObserveDrop(
        model_, running ? DropReason::kCancelledWhileRunning : DropReason::kCancelledInQueue);
  } else if (code == StatusCode::kDeadlineExceeded) {
    metrics_->ObserveDrop(
        model_, running ? DropReason::kDeadlineWhileRunning : DropReason::kDeadlineInQueue);
  }
}

size_t DynamicBatcher::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

bool DynamicBatcher::standing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return standing_.standing();
}

std::array<double, ThroughputEstimate::kSizeClasses> DynamicBatcher::slow_paces() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::array<double, ThroughputEstimate::kSizeClasses> paces;
  for (int c = 0; c < ThroughputEstimate::kSizeClasses; ++c)
    paces[c] = estimate_.slow_factor(ThroughputEstimate::SizeClassFirst(c));
  return paces;
}

void DynamicBatcher::ObserveOverflow() {
  // Without mu_: under overload every call the slots refuse comes here, for
  // every model.
  slot_refused_at_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

void DynamicBatcher::Stop() {
  RequestQueue::Requests abandoned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    abandoned = queue_.TakeAll();
  }
  batcher_cv_.notify_all();
  executor_cv_.notify_all();
  for (auto& r : abandoned) r->Fail(Unavailable("the server is shutting down"));
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void DynamicBatcher::BatcherLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    // Every wake-up first clears abandoned, cancelled and expired requests
    // out of the queue, even while every executor is busy.
    BatchDecision decision;
    if (idle_ > 0 && !queue_.empty()) {
      const Clock::time_point now = Clock::now();
      decision = FormBatch(&queue_, limits_, now, &estimate_);
      ObserveQueue(decision.batch, now);
    } else {
      if (idle_ > 0) standing_.ObserveIdle();
      decision.dropped = DropStale(&queue_, Clock::now());
    }
    if (!decision.dropped.empty()) {
      lock.unlock();
      FailDropped(decision.dropped);
      decision.dropped.clear();
      lock.lock();
      // Work may have arrived meanwhile: decide again before sleeping.
      if (decision.batch.slices.empty()) continue;
    }
    if (!decision.batch.slices.empty()) {
      running_tokens_ += decision.batch.num_tokens;
      ready_.push_back(std::move(decision.batch));
      --idle_;
      executor_cv_.notify_one();
      continue;
    }
    if (idle_ == 0 || queue_.empty()) {
      batcher_cv_.wait(lock);
    } else if (decision.wake_at != Clock::time_point::max()) {
      // Nothing due yet: sleep until the oldest request's delay expires or
      // new work arrives (a wake-up re-runs FormBatch).
      batcher_cv_.wait_until(lock, decision.wake_at);
    }
  }
}

void DynamicBatcher::ObserveQueue(const BatchPlan& batch, Clock::time_point now) {
  if (batch.slices.empty() || limits_.admission.overload_queue_time_us <= 0) return;
  const Clock::rep slot_refused_at = slot_refused_at_.load(std::memory_order_relaxed);
  if (slot_refused_at != kNeverRefused)
    standing_.ObserveOverflow(Clock::time_point(Clock::duration(slot_refused_at)));
  Clock::duration newest_wait = Clock::duration::max();
  for (const BatchSlice& slice : batch.slices)
    newest_wait = std::min(newest_wait, now - slice.request->enqueued());
  standing_.ObserveBatch(
      newest_wait, std::min(OverloadQueueTime(limits_.admission, estimate_), standing_.limit()),
      now, queue_.QueuedTokens(), std::max<int64_t>(estimate_.batch_tokens() / 2, 1));
}

void DynamicBatcher::ExecutorLoop(BatchEngine* engine) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    executor_cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
    if (ready_.empty()) return;  // stopping, nothing left to run
    BatchPlan plan = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    BatchSample sample;
    const Clock::time_point start = Clock::now();
    const Status ran = ExecuteBatch(plan, rule_, engine, metrics_ ? &sample : nullptr);
    const Clock::duration took = Clock::now() - start;
    if (metrics_) metrics_->ObserveBatch(model_, sample);
    lock.lock();
    if (ran.ok()) estimate_.Observe(plan.num_tokens, took);
    running_tokens_ -= plan.num_tokens;
    ++idle_;
    batcher_cv_.notify_one();
  }
}

}  // namespace encoderd::server
