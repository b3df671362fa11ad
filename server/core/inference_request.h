// One client call on its way through the batcher: its token sequences, what to
// compute for them, and the place the results are collected. Shared (by
// shared_ptr) between the gRPC handler, the batcher thread and the executors.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "engine/model/model_spec.h"

namespace encoderd::server {

using Clock = std::chrono::steady_clock;

// now + left, or Clock::time_point::max() (no deadline) where the sum is past
// what the clock holds: gRPC's timeouts go up to 99,999,999 hours, beyond
// the steady clock's range once a host has been up a while.
inline Clock::time_point DeadlineAfter(Clock::time_point now, std::chrono::nanoseconds left) {
  if (left >= Clock::time_point::max() - now) return Clock::time_point::max();
  return now + std::chrono::duration_cast<Clock::duration>(left);
}

enum class OutputKind {
  kEmbedding,       // one pooled row per sequence
  kClassification,  // label probabilities per sequence
  kHiddenStates,    // [num_tokens, hidden] per sequence
};

struct OutputSpec {
  OutputKind kind = OutputKind::kEmbedding;
  Pooling pooling = Pooling::kCls;
  bool normalize = false;
  // The first token each of the request's sequences pools from
  // (PackedBatch::pool_start; ServedModel::PoolStart).
  int32_t pool_start = 0;
};

class InferenceRequest {
 public:
  // `token_types`: empty (every token type 0) or one entry per sequence, each
  // empty (all 0) or as long as its sequence (a text pair's segments).
  InferenceRequest(uint64_t id, std::vector<std::vector<int32_t>> sequences, OutputSpec spec,
                   Clock::time_point enqueued, Clock::time_point deadline,
                   std::vector<std::vector<int32_t>> token_types = {});
  ~InferenceRequest();
  InferenceRequest(const InferenceRequest&) = delete;
  InferenceRequest& operator=(const InferenceRequest&) = delete;

  uint64_t id() const { return id_; }
  const OutputSpec& spec() const { return spec_; }
  int32_t num_sequences() const { return static_cast<int32_t>(sequences_.size()); }
  const std::vector<int32_t>& sequence(int32_t i) const { return sequences_[i]; }
  // Token types of sequence i: empty when all 0.
  const std::vector<int32_t>& token_types(int32_t i) const {
    static const std::vector<int32_t> kNone;
    return static_cast<size_t>(i) < token_types_.size() ? token_types_[i] : kNone;
  }
  // Tokens of sequences [first, num_sequences()).
  int64_t TokensFrom(int32_t first) const {
    return token_prefix_.back() - token_prefix_[static_cast<size_t>(first)];
  }
  Clock::time_point enqueued() const { return enqueued_; }
  Clock::time_point deadline() const { return deadline_; }
  // Whether a cancellation seen at `now` is the deadline's. gRPC's deadline
  // timer counts whole milliseconds, so it may cancel the call about a
  // millisecond before deadline(); and the client's own deadline passes
  // before the server's by the time its call took to arrive (the server
  // counts the timeout from then), when it cancels the stream as a cancel
  // of its own would (RST_STREAM CANCEL): under AddressSanitizer that
  // cancel came over 5 ms early. A cancel within 50 ms of the deadline, or
  // within the last quarter of a shorter call's time, is the deadline's.
  bool DeadlineReachedAt(Clock::time_point now) const {
    if (deadline_ == Clock::time_point::max()) return false;
    const Clock::duration slack =
        std::min<Clock::duration>(std::chrono::milliseconds(50), (deadline_ - enqueued_) / 4);
    return now + slack >= deadline_;
  }

  // Any thread. Once cancelled, the batcher drops the request (CANCELLED).
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // Batcher thread, with the batcher's lock held: some of the request's
  // sequences were taken into a batch (it is running, or has run).
  void MarkDispatched() { dispatched_.store(true); }
  bool dispatched() const { return dispatched_.load(); }

  // InferenceRequest objects alive in this process (every thread, every
  // batcher): 0 once no request state is left behind.
  static int64_t Live() { return live_.load(std::memory_order_relaxed); }

  // Batcher thread only: the first sequence not yet handed to an executor.
  int32_t next_sequence = 0;
  // Who sent it (the client connection), for fair queuing between clients:
  // set before Submit, read by the batcher.
  uint64_t peer = 0;
  // Batcher only: its start tag in the fair order (RequestQueue).
  double fair_start = 0;

  // Called once, with the request's status, by the thread that finishes it
  // (an executor, or whoever fails it), after every lock of the request is
  // released: how a caller that does not wait on done() learns the outcome.
  // Set it before the request is shared (before DynamicBatcher::Submit). A
  // request with no sequences is finished at construction and never calls it.
  void SetOnFinish(std::function<void(const Status&)> on_finish) {
    on_finish_ = std::move(on_finish);
  }
  // Executors: the result of sequence `index`; the last one completes the request.
  void Complete(int32_t index, std::vector<float> values);
  // Any thread: finishes the request with `status` unless it already finished.
  // True when this call finished it. With notify = false the caller must
  // call NotifyFinished() itself once it holds no lock (the on-finish
  // callback may take the caller's locks).
  bool Fail(const Status& status, bool notify = true);
  void NotifyFinished();
  // Records that a batch holding some of the request started at `start` and
  // ran for `inference_us`.
  void AddBatch(Clock::time_point start, int64_t inference_us);
  bool finished() const { return finished_.load(); }

  // Becomes ready when every sequence completed (OK) or the request failed.
  std::shared_future<Status> done() const { return done_; }
  // Valid once done() is OK: one result per sequence, in order.
  const std::vector<std::vector<float>>& results() const { return results_; }
  // Microseconds from enqueue to the start of the request's first batch.
  int64_t queue_us() const;
  // Sum of the engine time of the batches that computed the request.
  int64_t inference_us() const;

 private:
  void Finish(Status status);  // requires mu_

  const uint64_t id_;
  const std::vector<std::vector<int32_t>> sequences_;
  const std::vector<std::vector<int32_t>> token_types_;
  std::vector<int64_t> token_prefix_;  // tokens of sequences [0, i)
  const OutputSpec spec_;
  const Clock::time_point enqueued_;
  const Clock::time_point deadline_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> finished_{false};
  std::atomic<bool> dispatched_{false};
  static std::atomic<int64_t> live_;

  mutable std::mutex mu_;
  std::vector<std::vector<float>> results_;
  int32_t remaining_;
  bool started_ = false;
  Clock::time_point first_batch_;
  int64_t inference_us_ = 0;
  std::promise<Status> promise_;
  std::shared_future<Status> done_;
  Status final_status_;  // set by Finish, read by NotifyFinished
  std::function<void(const Status&)> on_finish_;
};

}  // namespace encoderd::server
