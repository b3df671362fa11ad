// The dynamic batching policy as a pure function of the queue and the time:
// no threads, no clock of its own, so tests can assert the exact batches.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/core/admission_policy.h"
#include "server/core/inference_request.h"

namespace encoderd::server {

struct BatchLimits {
  // Most tokens in one batch (a single longer sequence still runs, alone).
  int64_t max_batch_tokens = 8192;
  // Most sequences in one batch.
  int64_t max_batch_sequences = 256;
  // Longest a batch is predicted to take (from the throughput learned on
  // this machine): fewer tokens than max_batch_tokens when those would take
  // longer; 0: no limit. A call waits for the running batch and then for its
  // own, so this bounds the latency the batch size adds (as predicted),
  // whatever the machine's speed.
  int64_t max_batch_time_us = 0;
  // Longest a batch that is not full waits for more work, from the enqueue
  // time of the oldest queued request.
  int64_t max_queue_delay_us = 2000;
  // Most requests in the queue.
  int64_t max_queue_size = 1024;
  // Order the queue fairly between peers (RequestQueue), not first come
  // first served.
  bool fair_queuing = true;
  // Which calls the queue admits under overload.
  AdmissionLimits admission;
};

// The most tokens the next batch holds: max_batch_tokens, or fewer when
// `estimate` predicts those to take longer than max_batch_time_us (at least
// 1: a batch always holds one sequence).
int64_t BatchTokenCap(const BatchLimits& limits, const ThroughputEstimate* estimate);

// Sequences [begin, end) of one request.
struct BatchSlice {
  std::shared_ptr<InferenceRequest> request;
  int32_t begin = 0;
  int32_t end = 0;
};

struct BatchPlan {
  std::vector<BatchSlice> slices;
  int64_t num_tokens = 0;
  int64_t num_sequences = 0;
};

// Requests removed from the queue, each with the status to fail it with
// (CANCELLED or DEADLINE_EXCEEDED).
using DroppedRequests = std::vector<std::pair<std::shared_ptr<InferenceRequest>, Status>>;

struct BatchDecision {
  // Requests removed without being computed (or, split across batches,
  // without their remaining sequences computed).
  DroppedRequests dropped;
  // The batch to run now; empty when none should run yet.
  BatchPlan batch;
  // When no batch was formed but work is queued: when to decide again.
  Clock::time_point wake_at = Clock::time_point::max();
};

// The queue of requests, in the order batches take them; a request split
// across batches stays at the head until its last sequence is taken. Not
// thread-safe: owned by one batcher.
//
// Fair queuing between peers (request->peer, a client connection) is
// start-time fair queuing (Goyal, Vin and Cheng, SIGCOMM 1996) with tokens
// as the cost: a request's start tag is the later of the queue's virtual time
// and the finish tag of its peer's previous request (start + tokens), and the
// queue is kept in start-tag order (ties first come, first served). The
// virtual time is the start tag of the request last taken into a batch. A
// peer that queued a thousand requests has its tags far ahead; another
// peer's request starts at the virtual time and goes before them, so over
// time each peer with work queued gets an equal share of the batches'
// tokens. A peer with nothing queued is forgotten and starts again at the
// virtual time: peer keys are reused (through the HTTP/2 guard gRPC names a
// connection by its fd), and a new connection must not inherit a closed
// one's backlog; dropped work is not charged beyond that either. With one
// peer, or without fairness, the order is first come, first served.
class RequestQueue {
 public:
  explicit RequestQueue(int64_t max_size, bool fair = true) : max_size_(max_size), fair_(fair) {}
  // RESOURCE_EXHAUSTED when max_size requests are already queued.
  Status Push(std::shared_ptr<InferenceRequest> request);
  bool empty() const { return requests_.empty(); }
  size_t size() const { return requests_.size(); }
  // Tokens not yet handed to an executor (O(size)).
  int64_t QueuedTokens() const;
  // Of those, the tokens a new request of `peer` would wait behind: with
  // fairness, those of the requests whose start tag is not after its own
  // (O(size)). Requests of other peers arriving later may still go before it.
  int64_t TokensAhead(uint64_t peer) const;
  // A batch took (some of) `request`'s sequences: the virtual time moves to
  // its start tag.
  void Taken(const InferenceRequest& request);

  using Requests = std::deque<std::shared_ptr<InferenceRequest>>;
  const Requests& requests() const { return requests_; }
  // Removes one request; returns the iterator after it.
  Requests::const_iterator Erase(Requests::const_iterator at);
  // Removes the head (its last sequence was taken).
  void PopFront() { Erase(requests_.begin()); }
  // Empties the queue, returning what it held.
  Requests TakeAll();
  // Peers with requests queued (each with its finish tag).
  size_t peers() const { return peers_.size(); }

 private:
  // The start tag a new request of `peer` gets.
  double StartTag(uint64_t peer) const;

  struct Peer {
    double finish = 0;  // the finish tag of its last request
    int64_t queued = 0;
  };
  int64_t max_size_;
  bool fair_;
  Requests requests_;
  double virtual_time_ = 0;
  // With fairness: the peers with requests queued.
  std::unordered_map<uint64_t, Peer> peers_;
  // First come, first served without fairness: the push count.
  double pushed_ = 0;
};

// Removes from the queue the requests that finished already (silently) and
// those cancelled or past their deadline at `now` (returned with CANCELLED or
// DEADLINE_EXCEEDED, for the caller to fail). Never touches a request that
// is neither.
DroppedRequests DropStale(RequestQueue* queue, Clock::time_point now);

// Called when an executor is free. Drops cancelled, expired and already
// finished requests (DropStale), and, when `estimate` knows the throughput,
// those whose deadline passes before the next batch (as planned, within its
// limits) would finish at the pace of the slower recent batches
// (ThroughputEstimate::PredictSlow): never computed, since they cannot
// succeed. The batch's request due first goes one at a time, the batch
// planned again without it, until the batch ends before every deadline in
// it; then the requests beyond it that are due before it ends.
// Then packs sequences from the head in queue order until the next sequence
// would exceed a limit (BatchTokenCap for the tokens; the batch is full: it
// runs now) or the queue is exhausted (it runs only once the oldest request
// has waited max_queue_delay_us). Taken sequences leave the queue, and every request
// with a sequence in the batch is marked dispatched.
BatchDecision FormBatch(RequestQueue* queue, const BatchLimits& limits, Clock::time_point now,
                        const ThroughputEstimate* estimate = nullptr);

}  // namespace encoderd::server
