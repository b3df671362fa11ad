#include "server/core/batch_policy.h"

#include <algorithm>
#include <chrono>

namespace encoderd::server {

Status RequestQueue::Push(std::shared_ptr<InferenceRequest> request) {
  if (static_cast<int64_t>(requests_.size()) >= max_size_)
    return ResourceExhausted("the queue is full (" + std::to_string(max_size_) +
                             " requests); retry later");
  if (!fair_) {
    request->fair_start = pushed_++;
    requests_.push_back(std::move(request));
    return Status::Ok();
  }
  const double start = StartTag(request->peer);
  request->fair_start = start;
  Peer& peer = peers_[request->peer];
  peer.finish = start + static_cast<double>(request->TokensFrom(0));
  ++peer.queued;
  // After every request that starts no later: ties keep their arrival order.
  auto at = std::upper_bound(
      requests_.begin(), requests_.end(), start,
      [](double tag, const std::shared_ptr<InferenceRequest>& r) { return tag < r->fair_start; });
  requests_.insert(at, std::move(request));
  return Status::Ok();
}

RequestQueue::Requests::const_iterator RequestQueue::Erase(Requests::const_iterator at) {
  if (fair_) {
    auto peer = peers_.find((*at)->peer);
    if (peer != peers_.end() && --peer->second.queued == 0) peers_.erase(peer);
  }
  return requests_.erase(at);
}

RequestQueue::Requests RequestQueue::TakeAll() {
  Requests all;
  all.swap(requests_);
  peers_.clear();
  return all;
}

double RequestQueue::StartTag(uint64_t peer) const {
  const auto it = peers_.find(peer);
  return it == peers_.end() ? virtual_time_ : std::max(virtual_time_, it->second.finish);
}

void RequestQueue::Taken(const InferenceRequest& request) {
  if (fair_) virtual_time_ = std::max(virtual_time_, request.fair_start);
}

int64_t RequestQueue::QueuedTokens() const {
  int64_t tokens = 0;
  for (const auto& r : requests_) tokens += r->TokensFrom(r->next_sequence);
  return tokens;
}

int64_t RequestQueue::TokensAhead(uint64_t peer) const {
  if (!fair_) return QueuedTokens();
  const double start = StartTag(peer);
  int64_t tokens = 0;
  for (const auto& r : requests_) {
    if (r->fair_start > start) break;
    tokens += r->TokensFrom(r->next_sequence);
  }
  return tokens;
}

namespace {

// Removes a request that cannot finish before its deadline.
RequestQueue::Requests::const_iterator DropLate(RequestQueue* queue,
                                                RequestQueue::Requests::const_iterator at,
                                                DroppedRequests* dropped) {
  dropped->emplace_back(
      *at, DeadlineExceeded("the deadline would pass before the request could be computed"));
  return queue->Erase(at);
}

// Removes the requests whose deadline passes before `horizon`.
void DropLate(RequestQueue* queue, Clock::time_point horizon, DroppedRequests* dropped) {
  const auto& requests = queue->requests();
  for (auto it = requests.begin(); it != requests.end();)
    it = (*it)->deadline() < horizon ? DropLate(queue, it, dropped) : std::next(it);
}

}  // namespace

DroppedRequests DropStale(RequestQueue* queue, Clock::time_point now) {
  DroppedRequests dropped;
  const auto& requests = queue->requests();
  for (auto it = requests.begin(); it != requests.end();) {
    const auto& r = *it;
    if (r->finished()) {
      it = queue->Erase(it);
    } else if (r->cancelled()) {
      dropped.emplace_back(r, Cancelled("the client cancelled the request"));
      it = queue->Erase(it);
    } else if (r->deadline() <= now) {
      dropped.emplace_back(r, DeadlineExceeded("the deadline passed while queued"));
      it = queue->Erase(it);
    } else {
      ++it;
    }
  }
  return dropped;
}

int64_t BatchTokenCap(const BatchLimits& limits, const ThroughputEstimate* estimate) {
  if (limits.max_batch_time_us <= 0 || estimate == nullptr || !estimate->known())
    return limits.max_batch_tokens;
  const int64_t within =
      estimate->TokensWithin(std::chrono::microseconds(limits.max_batch_time_us));
  return std::max<int64_t>(std::min(limits.max_batch_tokens, within), 1);
}

namespace {

// Plans the next batch without touching the queue: sequences from the head in
// queue order until the next one would exceed a limit (`max_tokens` for the
// tokens). `full`: a limit was reached (the batch runs now).
BatchPlan PlanBatch(const RequestQueue& queue, const BatchLimits& limits, int64_t max_tokens,
                    bool* full) {
  BatchPlan plan;
  *full = false;
  const auto& requests = queue.requests();
  for (size_t i = 0; i < requests.size() && !*full; ++i) {
    const auto& r = requests[i];
    int32_t end = r->next_sequence;
    for (; end < r->num_sequences(); ++end) {
      const int64_t len = static_cast<int64_t>(r->sequence(end).size());
      const bool seq_cap = plan.num_sequences >= limits.max_batch_sequences;
      const bool token_cap = plan.num_sequences > 0 && plan.num_tokens + len > max_tokens;
      if (seq_cap || token_cap) {
        *full = true;
        break;
      }
      plan.num_tokens += len;
      ++plan.num_sequences;
    }
    if (end > r->next_sequence) plan.slices.push_back({r, r->next_sequence, end});
  }
  // A single sequence over the token budget runs alone.
  if (plan.num_tokens >= max_tokens) *full = true;
  if (plan.num_sequences >= limits.max_batch_sequences) *full = true;
  return plan;
}

}  // namespace

BatchDecision FormBatch(RequestQueue* queue, const BatchLimits& limits, Clock::time_point now,
                        const ThroughputEstimate* estimate) {
  BatchDecision decision;
  decision.dropped = DropStale(queue, now);
  const int64_t max_tokens = BatchTokenCap(limits, estimate);
  bool full = false;
  BatchPlan plan = PlanBatch(*queue, limits, max_tokens, &full);
  // Every queued request finishes with this batch or later. While the batch
  // would end after the deadline of the request in it due first (at the
  // pace of the slower recent batches), that request cannot succeed: it is
  // dropped, which frees room, and the batch is planned again. Dropping every
  // request due before the first plan's end dropped some that the smaller
  // batch would have served in time. Then the requests beyond the batch that
  // are due before it ends are dropped too.
  if (estimate != nullptr && estimate->known() && limits.admission.predict_deadlines) {
    Clock::time_point end = now;
    while (!plan.slices.empty()) {
      end = now + estimate->PredictSlow(plan.num_tokens);
      const auto first = std::min_element(plan.slices.begin(), plan.slices.end(),
                                          [](const BatchSlice& a, const BatchSlice& b) {
                                            return a.request->deadline() < b.request->deadline();
                                          });
      if (first->request->deadline() >= end) break;
      const auto& requests = queue->requests();
      DropLate(queue, std::find(requests.begin(), requests.end(), first->request),
               &decision.dropped);
      plan = PlanBatch(*queue, limits, max_tokens, &full);
    }
    DropLate(queue, end, &decision.dropped);
  }
  const auto& requests = queue->requests();
  if (requests.empty()) return decision;

  // The head is not the oldest request when fair queuing put a newer one
  // first.
  Clock::time_point oldest = requests.front()->enqueued();
  for (const auto& r : requests) oldest = std::min(oldest, r->enqueued());
  const Clock::time_point due = oldest + std::chrono::microseconds(limits.max_queue_delay_us);
  if (!full && now < due) {
    decision.wake_at = due;
    return decision;
  }
  for (const BatchSlice& slice : plan.slices) {
    slice.request->next_sequence = slice.end;
    slice.request->MarkDispatched();
    queue->Taken(*slice.request);
  }
  while (!requests.empty() && requests.front()->next_sequence >= requests.front()->num_sequences())
    queue->PopFront();
  decision.batch = std::move(plan);
  return decision;
}

}  // namespace encoderd::server
