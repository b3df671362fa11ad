#include "server/dynamic_batcher.h"

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
      queue_(limits.max_queue_size),
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
    if (stopping_) return Unavailable("the server is shutting down");
    RETURN_IF_ERROR(queue_.Push(std::move(request)));
  }
  batcher_cv_.notify_one();
  return Status::Ok();
}

size_t DynamicBatcher::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void DynamicBatcher::Stop() {
  std::deque<std::shared_ptr<InferenceRequest>> abandoned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    abandoned.swap(queue_.requests());
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
    if (idle_ == 0 || queue_.empty()) {
      batcher_cv_.wait(lock);
      continue;
    }
    BatchDecision decision = FormBatch(&queue_, limits_, Clock::now());
    if (!decision.dropped.empty()) {
      lock.unlock();
      for (auto& [request, status] : decision.dropped) request->Fail(status);
      lock.lock();
    }
    if (!decision.batch.slices.empty()) {
      ready_.push_back(std::move(decision.batch));
      --idle_;
      executor_cv_.notify_one();
      continue;
    }
    // Nothing due yet: sleep until the oldest request's delay expires or
    // new work arrives (a wake-up re-runs FormBatch).
    if (decision.wake_at != Clock::time_point::max())
      batcher_cv_.wait_until(lock, decision.wake_at);
  }
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
    (void)ExecuteBatch(plan, rule_, engine, metrics_ ? &sample : nullptr);
    if (metrics_) metrics_->ObserveBatch(model_, sample);
    lock.lock();
    ++idle_;
    batcher_cv_.notify_one();
  }
}

}  // namespace encoderd::server
