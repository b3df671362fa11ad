#include "server/core/inference_request.h"

#include <utility>

namespace encoderd::server {

std::atomic<int64_t> InferenceRequest::live_{0};

InferenceRequest::InferenceRequest(uint64_t id, std::vector<std::vector<int32_t>> sequences,
                                   OutputSpec spec, Clock::time_point enqueued,
                                   Clock::time_point deadline,
                                   std::vector<std::vector<int32_t>> token_types)
    : id_(id),
      sequences_(std::move(sequences)),
      token_types_(std::move(token_types)),
      spec_(spec),
      enqueued_(enqueued),
      deadline_(deadline),
      results_(sequences_.size()),
      remaining_(static_cast<int32_t>(sequences_.size())),
      done_(promise_.get_future().share()) {
  live_.fetch_add(1, std::memory_order_relaxed);
  token_prefix_.reserve(sequences_.size() + 1);
  token_prefix_.push_back(0);
  for (const auto& s : sequences_)
    token_prefix_.push_back(token_prefix_.back() + static_cast<int64_t>(s.size()));
  if (remaining_ == 0) Finish(Status::Ok());
}

InferenceRequest::~InferenceRequest() { live_.fetch_sub(1, std::memory_order_relaxed); }

void InferenceRequest::Complete(int32_t index, std::vector<float> values) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_.load() || index < 0 || index >= num_sequences()) return;
    results_[index] = std::move(values);
    if (--remaining_ != 0) return;
    Finish(Status::Ok());
  }
  NotifyFinished();
}

bool InferenceRequest::Fail(const Status& status, bool notify) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_.load()) return false;
    Finish(status);
  }
  if (notify) NotifyFinished();
  return true;
}

void InferenceRequest::Finish(Status status) {
  final_status_ = status;
  finished_.store(true);
  promise_.set_value(std::move(status));
}

void InferenceRequest::NotifyFinished() {
  // Only the thread that finished the request gets here, once; the callback
  // and its captures go with it.
  std::function<void(const Status&)> on_finish = std::move(on_finish_);
  on_finish_ = nullptr;
  if (on_finish) on_finish(final_status_);
}

void InferenceRequest::AddBatch(Clock::time_point start, int64_t inference_us) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_ || start < first_batch_) first_batch_ = start;
  started_ = true;
  inference_us_ += inference_us;
}

int64_t InferenceRequest::queue_us() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_) return 0;
  return std::chrono::duration_cast<std::chrono::microseconds>(first_batch_ - enqueued_).count();
}

int64_t InferenceRequest::inference_us() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inference_us_;
}

}  // namespace encoderd::server
