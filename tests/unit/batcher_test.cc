// Dynamic batcher: the policy (FormBatch) on a fake clock with the exact
// batches expected, the executor's error handling, and the threaded batcher
// with a fake engine.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "server/core/batch_executor.h"
#include "server/core/batch_policy.h"
#include "server/core/dynamic_batcher.h"

namespace encoderd::server {
namespace {

using std::chrono::microseconds;

const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);
const Clock::time_point kNever = Clock::time_point::max();

// A request with one sequence per length (token ids 1..len).
std::shared_ptr<InferenceRequest> MakeRequest(uint64_t id, std::vector<int> lengths,
                                              Clock::time_point enqueued = kT0,
                                              Clock::time_point deadline = kNever) {
  std::vector<std::vector<int32_t>> seqs;
  for (int len : lengths) {
    std::vector<int32_t> s;
    for (int t = 0; t < len; ++t) s.push_back(static_cast<int32_t>(id * 100 + t + 1));
    seqs.push_back(s);
  }
  return std::make_shared<InferenceRequest>(id, std::move(seqs), OutputSpec{}, enqueued, deadline);
}

// "id:begin-end" per slice, e.g. {"1:0-2", "2:0-1"}.
std::vector<std::string> Slices(const BatchPlan& plan) {
  std::vector<std::string> out;
  for (const BatchSlice& s : plan.slices)
    out.push_back(std::to_string(s.request->id()) + ":" + std::to_string(s.begin) + "-" +
                  std::to_string(s.end));
  return out;
}

BatchLimits Limits(int64_t tokens, int64_t sequences, int64_t delay_us = 1000,
                   int64_t queue = 100) {
  BatchLimits l;
  l.max_batch_tokens = tokens;
  l.max_batch_sequences = sequences;
  l.max_queue_delay_us = delay_us;
  l.max_queue_size = queue;
  return l;
}

TEST(BatchPolicyTest, TokenBudgetClosesTheBatchAndRunsItAtOnce) {
  RequestQueue q(100);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(q.Push(MakeRequest(id, {4})).ok());
  BatchDecision d = FormBatch(&q, Limits(10, 100), kT0);
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:0-1", "2:0-1"}));
  EXPECT_EQ(d.batch.num_tokens, 8);
  ASSERT_EQ(q.size(), 1u);
  // The rest is not full: it waits for the delay, then runs.
  d = FormBatch(&q, Limits(10, 100), kT0);
  EXPECT_TRUE(d.batch.slices.empty());
  EXPECT_EQ(d.wake_at, kT0 + microseconds(1000));
  d = FormBatch(&q, Limits(10, 100), kT0 + microseconds(1000));
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"3:0-1"}));
  EXPECT_TRUE(q.empty());
}

TEST(BatchPolicyTest, SequenceCap) {
  RequestQueue q(100);
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(q.Push(MakeRequest(id, {1})).ok());
  BatchDecision d = FormBatch(&q, Limits(1000, 2), kT0);
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:0-1", "2:0-1"}));
  d = FormBatch(&q, Limits(1000, 2), kT0);
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"3:0-1", "4:0-1"}));
  d = FormBatch(&q, Limits(1000, 2), kT0);
  EXPECT_TRUE(d.batch.slices.empty());
}

TEST(BatchPolicyTest, WaitsAtMostTheQueueDelayFromTheOldestRequest) {
  RequestQueue q(100);
  ASSERT_TRUE(q.Push(MakeRequest(1, {3}, kT0)).ok());
  ASSERT_TRUE(q.Push(MakeRequest(2, {3}, kT0 + microseconds(600))).ok());
  BatchDecision d = FormBatch(&q, Limits(100, 100, 1000), kT0 + microseconds(999));
  EXPECT_TRUE(d.batch.slices.empty());
  EXPECT_EQ(d.wake_at, kT0 + microseconds(1000));
  EXPECT_EQ(q.size(), 2u);
  d = FormBatch(&q, Limits(100, 100, 1000), kT0 + microseconds(1000));
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:0-1", "2:0-1"}));
}

TEST(BatchPolicyTest, AFullBatchNeverWaits) {
  RequestQueue q(100);
  ASSERT_TRUE(q.Push(MakeRequest(1, {6})).ok());
  ASSERT_TRUE(q.Push(MakeRequest(2, {4})).ok());
  // Exactly the token budget: full, runs at the enqueue instant.
  BatchDecision d = FormBatch(&q, Limits(10, 100, 1000000), kT0);
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:0-1", "2:0-1"}));
  // Exactly the sequence cap: full as well.
  ASSERT_TRUE(q.Push(MakeRequest(3, {1, 1})).ok());
  d = FormBatch(&q, Limits(10, 2, 1000000), kT0);
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"3:0-2"}));
}

TEST(BatchPolicyTest, SplitsALargeRequestAcrossBatchesInOrder) {
  RequestQueue q(100);
  ASSERT_TRUE(q.Push(MakeRequest(1, {3, 3, 3, 3, 3})).ok());
  ASSERT_TRUE(q.Push(MakeRequest(2, {2})).ok());
  const BatchLimits l = Limits(7, 100);
  BatchDecision d = FormBatch(&q, l, kT0);
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:0-2"}));
  d = FormBatch(&q, l, kT0);
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:2-4"}));
  // 3 + 2 tokens: not full, but request 1 has waited since kT0.
  d = FormBatch(&q, l, kT0 + microseconds(1000));
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:4-5", "2:0-1"}));
  EXPECT_TRUE(q.empty());
}

TEST(BatchPolicyTest, AnEntryThatDoesNotFitStaysAtTheHead) {
  RequestQueue q(100);
  ASSERT_TRUE(q.Push(MakeRequest(1, {4})).ok());
  ASSERT_TRUE(q.Push(MakeRequest(2, {8})).ok());
  ASSERT_TRUE(q.Push(MakeRequest(3, {1})).ok());
  BatchDecision d = FormBatch(&q, Limits(10, 100), kT0);
  // FIFO: request 3 would fit but does not overtake request 2.
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:0-1"}));
  ASSERT_EQ(q.requests().front()->id(), 2u);
  d = FormBatch(&q, Limits(10, 100), kT0 + microseconds(1000));
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"2:0-1", "3:0-1"}));
}

TEST(BatchPolicyTest, ASequenceLongerThanTheBudgetRunsAlone) {
  RequestQueue q(100);
  ASSERT_TRUE(q.Push(MakeRequest(1, {20})).ok());
  ASSERT_TRUE(q.Push(MakeRequest(2, {1})).ok());
  BatchDecision d = FormBatch(&q, Limits(10, 100), kT0);
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:0-1"}));
  EXPECT_EQ(d.batch.num_tokens, 20);
}

TEST(BatchPolicyTest, DropsCancelledAndExpiredRequestsBeforePacking) {
  RequestQueue q(100);
  auto cancelled = MakeRequest(1, {2});
  cancelled->Cancel();
  auto expired = MakeRequest(2, {2}, kT0, kT0 + microseconds(50));
  auto alive = MakeRequest(3, {2}, kT0, kT0 + microseconds(5000));
  ASSERT_TRUE(q.Push(cancelled).ok());
  ASSERT_TRUE(q.Push(expired).ok());
  ASSERT_TRUE(q.Push(alive).ok());
  BatchDecision d = FormBatch(&q, Limits(100, 100), kT0 + microseconds(1000));
  ASSERT_EQ(d.dropped.size(), 2u);
  EXPECT_EQ(d.dropped[0].first->id(), 1u);
  EXPECT_EQ(d.dropped[0].second.code(), StatusCode::kCancelled);
  EXPECT_EQ(d.dropped[1].first->id(), 2u);
  EXPECT_EQ(d.dropped[1].second.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"3:0-1"}));
}

TEST(BatchPolicyTest, RequestsTheHandlerAlreadyFinishedAreDroppedSilently) {
  RequestQueue q(100);
  auto gone = MakeRequest(1, {2});
  gone->Fail(Cancelled("client left"));
  ASSERT_TRUE(q.Push(gone).ok());
  ASSERT_TRUE(q.Push(MakeRequest(2, {2})).ok());
  BatchDecision d = FormBatch(&q, Limits(100, 100), kT0 + microseconds(1000));
  EXPECT_TRUE(d.dropped.empty());
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"2:0-1"}));
  EXPECT_EQ(gone->done().get().code(), StatusCode::kCancelled);
}

TEST(BatchPolicyTest, DropStaleLeavesLiveRequestsAndFormBatchMarksTakenOnesDispatched) {
  RequestQueue q(100);
  auto gone = MakeRequest(1, {2});
  gone->Fail(Cancelled("client left"));
  auto expired = MakeRequest(2, {2}, kT0, kT0 + microseconds(10));
  auto first = MakeRequest(3, {2, 2});
  auto second = MakeRequest(4, {2});
  for (const auto& r : {gone, expired, first, second}) ASSERT_TRUE(q.Push(r).ok());
  DroppedRequests dropped = DropStale(&q, kT0 + microseconds(10));
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].first->id(), 2u);
  EXPECT_EQ(q.size(), 2u);
  // A batch of 3 tokens takes the first sequence of request 3 only.
  BatchDecision d = FormBatch(&q, Limits(3, 100), kT0 + microseconds(10));
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"3:0-1"}));
  EXPECT_TRUE(first->dispatched());
  EXPECT_FALSE(second->dispatched());
}

TEST(BatchPolicyTest, AFullQueueIsResourceExhausted) {
  RequestQueue q(2);
  ASSERT_TRUE(q.Push(MakeRequest(1, {1})).ok());
  ASSERT_TRUE(q.Push(MakeRequest(2, {1})).ok());
  Status s = q.Push(MakeRequest(3, {1}));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(q.size(), 2u);
}

// A request of `peer` with one sequence per length.
std::shared_ptr<InferenceRequest> FromPeer(uint64_t peer, uint64_t id, std::vector<int> lengths,
                                           Clock::time_point enqueued = kT0) {
  auto r = MakeRequest(id, std::move(lengths), enqueued);
  r->peer = peer;
  return r;
}

std::vector<uint64_t> QueuedIds(const RequestQueue& q) {
  std::vector<uint64_t> ids;
  for (const auto& r : q.requests()) ids.push_back(r->id());
  return ids;
}

// Peer 1 floods: ten requests of 10 tokens. Peer 2's one request goes second,
// after the request of peer 1 that starts at the same virtual time, and waits
// behind that one only; without fairness it is last, behind all ten.
TEST(FairQueueTest, AnotherPeersRequestGoesBeforeAFloodersBacklog) {
  for (const bool fair : {true, false}) {
    RequestQueue q(100, fair);
    for (uint64_t id = 1; id <= 10; ++id) ASSERT_TRUE(q.Push(FromPeer(1, id, {10})).ok());
    EXPECT_EQ(q.TokensAhead(2), fair ? 10 : 100);
    EXPECT_EQ(q.TokensAhead(1), 100);
    ASSERT_TRUE(q.Push(FromPeer(2, 11, {10})).ok());
    if (fair) {
      EXPECT_EQ(QueuedIds(q), (std::vector<uint64_t>{1, 11, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
    } else {
      EXPECT_EQ(QueuedIds(q), (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
    }
    const BatchDecision d = FormBatch(&q, Limits(20, 100), kT0 + microseconds(5000));
    EXPECT_EQ(Slices(d.batch), fair ? (std::vector<std::string>{"1:0-1", "11:0-1"})
                                    : (std::vector<std::string>{"1:0-1", "2:0-1"}));
  }
}

// Two peers with backlogs share every batch's tokens equally whatever their
// request sizes: peer 1 sends 5-token requests, peer 2 20-token ones.
TEST(FairQueueTest, BackloggedPeersShareTheTokensEqually) {
  RequestQueue q(1000);
  uint64_t id = 1;
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(q.Push(FromPeer(1, id++, {5})).ok());
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(q.Push(FromPeer(2, id++, {20})).ok());
  std::map<uint64_t, int64_t> tokens;
  for (int b = 0; b < 10; ++b) {
    const BatchDecision d = FormBatch(&q, Limits(100, 100), kT0 + microseconds(5000));
    for (const BatchSlice& slice : d.batch.slices)
      tokens[slice.request->peer] += slice.request->TokensFrom(slice.begin);
  }
  EXPECT_GE(tokens[1] + tokens[2], 900);
  EXPECT_NEAR(tokens[1], tokens[2], 40);
}

// A peer with nothing queued is forgotten: a key reused by a new connection
// (gRPC names a guarded connection by its fd) does not inherit the backlog
// of a closed one whose calls were cancelled, nor one taken into batches.
TEST(FairQueueTest, APeerWithNothingQueuedStartsAgainAtTheVirtualTime) {
  RequestQueue q(100);
  std::vector<std::shared_ptr<InferenceRequest>> flood;
  for (uint64_t id = 1; id <= 10; ++id) {
    flood.push_back(FromPeer(1, id, {10}));
    ASSERT_TRUE(q.Push(flood.back()).ok());
  }
  EXPECT_EQ(q.peers(), 1u);
  for (auto& r : flood) r->Cancel();
  EXPECT_EQ(DropStale(&q, kT0).size(), 10u);
  EXPECT_EQ(q.peers(), 0u);
  auto again = FromPeer(1, 11, {10});
  ASSERT_TRUE(q.Push(again).ok());
  EXPECT_EQ(again->fair_start, 0);  // not 100, the closed connection's finish tag
  const BatchDecision d = FormBatch(&q, Limits(10, 100), kT0 + microseconds(5000));
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"11:0-1"}));
  EXPECT_EQ(q.peers(), 0u);
}

// A request split across batches keeps the head while a new peer arrives.
TEST(FairQueueTest, ASplitRequestStaysAtTheHead) {
  RequestQueue q(100);
  ASSERT_TRUE(q.Push(FromPeer(1, 1, {4, 4, 4})).ok());
  BatchDecision d = FormBatch(&q, Limits(8, 100), kT0 + microseconds(5000));
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:0-2"}));
  ASSERT_TRUE(q.Push(FromPeer(2, 2, {4})).ok());
  EXPECT_EQ(QueuedIds(q), (std::vector<uint64_t>{1, 2}));
  d = FormBatch(&q, Limits(8, 100), kT0 + microseconds(5000));
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:2-3", "2:0-1"}));
}

// The batching delay counts from the oldest request, which fair queuing may
// have put behind a newer one.
TEST(FairQueueTest, TheDelayCountsFromTheOldestRequestNotTheHead) {
  RequestQueue q(100);
  ASSERT_TRUE(q.Push(FromPeer(1, 1, {3}, kT0)).ok());
  ASSERT_TRUE(q.Push(FromPeer(1, 2, {3}, kT0 + microseconds(100))).ok());
  BatchDecision d = FormBatch(&q, Limits(3, 100, 1000), kT0 + microseconds(200));
  EXPECT_EQ(Slices(d.batch), (std::vector<std::string>{"1:0-1"}));  // full: runs at once
  ASSERT_TRUE(q.Push(FromPeer(2, 3, {1}, kT0 + microseconds(900))).ok());
  EXPECT_EQ(QueuedIds(q), (std::vector<uint64_t>{3, 2}));
  d = FormBatch(&q, Limits(100, 100, 1000), kT0 + microseconds(950));
  EXPECT_TRUE(d.batch.slices.empty());
  EXPECT_EQ(d.wake_at, kT0 + microseconds(1100));
}

// Returns {request_id, index, length, first token id} per sequence.
class EchoEngine : public BatchEngine {
 public:
  StatusOr<std::vector<std::vector<float>>> Run(const PackedBatch& batch,
                                                const std::vector<OutputSpec>& specs,
                                                const std::function<bool()>&) override {
    ++batches;
    std::vector<std::vector<float>> out;
    for (int64_t i = 0; i < batch.num_sequences(); ++i) {
      out.push_back({static_cast<float>(batch.origins[i].request_id),
                     static_cast<float>(batch.origins[i].index),
                     static_cast<float>(batch.length(i)),
                     static_cast<float>(batch.token_ids[batch.cu_seqlens[i]])});
    }
    return out;
  }
  std::atomic<int> batches{0};
};

class FailingEngine : public BatchEngine {
 public:
  explicit FailingEngine(bool throws) : throws_(throws) {}
  StatusOr<std::vector<std::vector<float>>> Run(const PackedBatch&, const std::vector<OutputSpec>&,
                                                const std::function<bool()>&) override {
    if (throws_) throw std::runtime_error("kernel exploded");
    return InvalidArgument("bad batch");
  }

 private:
  bool throws_;
};

TEST(BatchExecutorTest, AFailedBatchFailsEveryRequestWithTheSameStatus) {
  for (bool throws : {false, true}) {
    auto a = MakeRequest(1, {2, 3});
    auto b = MakeRequest(2, {1});
    BatchPlan plan;
    plan.slices = {{a, 0, 2}, {b, 0, 1}};
    FailingEngine engine(throws);
    Status s = ExecuteBatch(plan, PackingRule{}, &engine);
    const StatusCode want = throws ? StatusCode::kInternal : StatusCode::kInvalidArgument;
    EXPECT_EQ(s.code(), want);
    EXPECT_EQ(a->done().get().code(), want);
    EXPECT_EQ(b->done().get().code(), want);
    EXPECT_EQ(a->done().get().message(), b->done().get().message());
  }
}

// Runs `during` inside the batch (as a client's cancel would arrive), then
// ends early with CANCELLED where the stop check says so, as the encoder
// does between layers; else answers every sequence.
class StoppableEngine : public BatchEngine {
 public:
  explicit StoppableEngine(std::function<void()> during) : during_(std::move(during)) {}
  StatusOr<std::vector<std::vector<float>>> Run(const PackedBatch& batch,
                                                const std::vector<OutputSpec>&,
                                                const std::function<bool()>& stop) override {
    asked_before = stop();
    during_();
    if (stop()) return Cancelled("stopped between layers");
    return std::vector<std::vector<float>>(batch.num_sequences(), std::vector<float>{7});
  }
  bool asked_before = true;

 private:
  std::function<void()> during_;
};

// Until 2026-12-04 a batch ran to its end whatever became of its requests:
// a client's cancel freed no CPU, and a shutdown waited for the batch
// running at the end of its grace. Now the engine is told to stop once
// every request of the batch is gone, and only then.
TEST(BatchExecutorTest, TheEngineIsToldToStopOnceEveryRequestOfTheBatchIsGone) {
  for (int gone : {0, 1, 2}) {
    SCOPED_TRACE(std::to_string(gone) + " of 2 requests cancelled while the batch runs");
    auto a = MakeRequest(1, {2, 3});
    auto b = MakeRequest(2, {1});
    BatchPlan plan;
    plan.slices = {{a, 0, 2}, {b, 0, 1}};
    StoppableEngine engine([&] {
      if (gone >= 1) a->Fail(Cancelled("client cancelled"));
      if (gone >= 2) b->Fail(DeadlineExceeded("deadline passed"));
    });
    BatchSample sample;
    const Status ran = ExecuteBatch(plan, PackingRule{}, &engine, &sample);
    EXPECT_FALSE(engine.asked_before);
    EXPECT_EQ(sample.tokens, 6);
    if (gone < 2) {
      EXPECT_TRUE(ran.ok()) << ran.ToString();
      EXPECT_TRUE(sample.ok);
      EXPECT_EQ(b->done().get().code(), StatusCode::kOk);
      EXPECT_EQ(b->results(), (std::vector<std::vector<float>>{{7}}));
    } else {
      EXPECT_EQ(ran.code(), StatusCode::kCancelled);
      EXPECT_FALSE(sample.ok);
      EXPECT_EQ(b->done().get().code(), StatusCode::kDeadlineExceeded);
    }
    EXPECT_EQ(sample.abandoned, gone == 2);
    EXPECT_EQ(a->done().get().code(), gone >= 1 ? StatusCode::kCancelled : StatusCode::kOk);
  }
  // An engine's own CANCELLED with a request still waiting is a failure
  // like any other, not an abandoned batch.
  auto c = MakeRequest(3, {4});
  BatchPlan plan;
  plan.slices = {{c, 0, 1}};
  class Refusing : public BatchEngine {
    StatusOr<std::vector<std::vector<float>>> Run(const PackedBatch&,
                                                  const std::vector<OutputSpec>&,
                                                  const std::function<bool()>&) override {
      return Cancelled("device reset");
    }
  } refusing;
  BatchSample sample;
  EXPECT_EQ(ExecuteBatch(plan, PackingRule{}, &refusing, &sample).code(), StatusCode::kCancelled);
  EXPECT_FALSE(sample.abandoned);
  EXPECT_EQ(c->done().get().code(), StatusCode::kCancelled);
}

TEST(DynamicBatcherTest, ConcurrentRaggedRequestsGetExactlyTheirOwnResults) {
  std::vector<std::unique_ptr<BatchEngine>> replicas;
  replicas.push_back(std::make_unique<EchoEngine>());
  replicas.push_back(std::make_unique<EchoEngine>());
  DynamicBatcher batcher(Limits(64, 16, 200, 1000), PackingRule{}, std::move(replicas));
  std::vector<std::thread> clients;
  std::atomic<int> wrong{0};
  for (uint64_t id = 1; id <= 64; ++id) {
    clients.emplace_back([&, id] {
      std::vector<int> lengths;
      for (uint64_t i = 0; i < 1 + id % 7; ++i)
        lengths.push_back(1 + static_cast<int>((id * 7 + i * 3) % 13));
      auto r = MakeRequest(id, lengths, Clock::now());
      if (!batcher.Submit(r).ok() || !r->done().get().ok()) {
        ++wrong;
        return;
      }
      for (int32_t i = 0; i < r->num_sequences(); ++i) {
        const std::vector<float> want = {static_cast<float>(id), static_cast<float>(i),
                                         static_cast<float>(lengths[i]),
                                         static_cast<float>(id * 100 + 1)};
        if (r->results()[i] != want) ++wrong;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Blocks every batch until Release(); Started() waits for a batch to begin.
class GateEngine : public BatchEngine {
 public:
  StatusOr<std::vector<std::vector<float>>> Run(const PackedBatch& batch,
                                                const std::vector<OutputSpec>&,
                                                const std::function<bool()>&) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++started_;
    tokens_.push_back(batch.num_tokens());
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
    return std::vector<std::vector<float>>(batch.num_sequences(), std::vector<float>{1});
  }
  bool Started(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return started_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // The tokens of each batch begun, in order.
  std::vector<int64_t> BatchTokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int started_ = 0;
  std::vector<int64_t> tokens_;
  bool open_ = false;
};

class DropCounter : public ServingMetrics {
 public:
  void ObserveRequest(const std::string&, const RequestSample&) override {}
  void ObserveBatch(const std::string&, const BatchSample&) override {}
  void AddInFlight(const std::string&, int) override {}
  void ObserveDrop(const std::string& model, DropReason reason) override {
    std::lock_guard<std::mutex> lock(mu);
    ++counts[model + "/" + DropReasonName(reason)];
  }
  std::map<std::string, int> Counts() {
    std::lock_guard<std::mutex> lock(mu);
    return counts;
  }
  std::mutex mu;
  std::map<std::string, int> counts;
};

// A batcher of model "m" with one executor, which runs `*engine`.
std::unique_ptr<DynamicBatcher> GatedBatcher(DropCounter* drops, GateEngine** engine,
                                             BatchLimits limits = Limits(1000, 100, 0)) {
  std::vector<std::unique_ptr<BatchEngine>> replicas;
  auto gate = std::make_unique<GateEngine>();
  *engine = gate.get();
  replicas.push_back(std::move(gate));
  return std::make_unique<DynamicBatcher>(limits, PackingRule{}, std::move(replicas), drops, "m");
}

bool QueueEmptiesWithin(const DynamicBatcher& batcher, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (batcher.queue_depth() != 0 && Clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return batcher.queue_depth() == 0;
}

TEST(DynamicBatcherTest, EachDropIsCountedOnceByWhereTheRequestWas) {
  const int64_t live_before = InferenceRequest::Live();
  DropCounter drops;
  {
    GateEngine* engine = nullptr;
    std::unique_ptr<DynamicBatcher> owned = GatedBatcher(&drops, &engine);
    DynamicBatcher& batcher = *owned;

    // Already expired: refused before it takes a queue entry.
    auto expired = MakeRequest(1, {2}, Clock::now(), Clock::now() - microseconds(1));
    EXPECT_EQ(batcher.Submit(expired).code(), StatusCode::kDeadlineExceeded);
    EXPECT_EQ(batcher.queue_depth(), 0u);
    // gRPC then cancels the call (its deadline passed): the refused request
    // is finished, so the Abandon that follows counts no second drop (it
    // counted deadline_in_queue too, for a request never queued).
    EXPECT_TRUE(expired->finished());
    EXPECT_FALSE(batcher.Abandon(expired, DeadlineExceeded("deadline passed")));

    // `running` occupies the only executor; the others wait behind it.
    auto running = MakeRequest(2, {2}, Clock::now());
    ASSERT_TRUE(batcher.Submit(running).ok());
    ASSERT_TRUE(engine->Started(1));
    auto cancelled = MakeRequest(3, {2}, Clock::now());
    auto late = MakeRequest(4, {2}, Clock::now());
    ASSERT_TRUE(batcher.Submit(cancelled).ok());
    ASSERT_TRUE(batcher.Submit(late).ok());
    EXPECT_EQ(batcher.queue_depth(), 2u);
    // Abandoned requests leave the queue at once, though no executor is free.
    EXPECT_TRUE(batcher.Abandon(cancelled, Cancelled("client left")));
    EXPECT_TRUE(batcher.Abandon(late, DeadlineExceeded("too late")));
    EXPECT_FALSE(batcher.Abandon(late, Cancelled("again")));  // finished: not counted twice
    EXPECT_TRUE(QueueEmptiesWithin(batcher, std::chrono::milliseconds(10000)));  // hang guard
    // Cancelled while running: the client gets CANCELLED, the results are discarded.
    EXPECT_TRUE(batcher.Abandon(running, Cancelled("client left")));
    engine->Release();
    EXPECT_EQ(running->done().get().code(), StatusCode::kCancelled);
    EXPECT_EQ(cancelled->done().get().code(), StatusCode::kCancelled);
    EXPECT_EQ(late->done().get().code(), StatusCode::kDeadlineExceeded);
    EXPECT_FALSE(cancelled->dispatched());
    EXPECT_FALSE(late->dispatched());
    batcher.Stop();
  }
  EXPECT_EQ(drops.Counts(), (std::map<std::string, int>{{"m/cancelled_in_queue", 1},
                                                        {"m/cancelled_while_running", 1},
                                                        {"m/deadline_before_queue", 1},
                                                        {"m/deadline_in_queue", 1}}));
  // Every request object is gone once its last owner is.
  EXPECT_EQ(InferenceRequest::Live(), live_before);
}

TEST(DynamicBatcherTest, AFullQueuesRefusalIsCountedByItsReason) {
  DropCounter drops;
  GateEngine* engine = nullptr;
  std::unique_ptr<DynamicBatcher> owned =
      GatedBatcher(&drops, &engine, Limits(1000, 100, 0, /*queue=*/1));
  DynamicBatcher& batcher = *owned;
  auto running = MakeRequest(1, {2}, Clock::now());
  ASSERT_TRUE(batcher.Submit(running).ok());
  ASSERT_TRUE(engine->Started(1));
  auto queued = MakeRequest(2, {2}, Clock::now());
  ASSERT_TRUE(batcher.Submit(queued).ok());
  auto turned_away = MakeRequest(3, {2}, Clock::now());
  const Status refused = batcher.Submit(turned_away);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("the queue is full"), std::string::npos) << refused.message();
  EXPECT_FALSE(batcher.Abandon(turned_away, Cancelled("client left")));  // not counted again
  engine->Release();
  EXPECT_TRUE(running->done().get().ok());
  EXPECT_TRUE(queued->done().get().ok());
  batcher.Stop();
  EXPECT_EQ(drops.Counts(), (std::map<std::string, int>{{"m/refused_queue_full", 1}}));
}

// DynamicBatcher::Precheck on a batcher whose one replica holds every batch
// until Finish(), deadlines a minute away.
class PrecheckTest : public ::testing::Test {
 protected:
  PrecheckTest() : owned_(GatedBatcher(&drops_, &engine_)), batcher_(*owned_) {}
  // A test that stopped early must not leave Stop() waiting on a held batch.
  ~PrecheckTest() override { engine_->Release(); }

  // As a model's calibration at load: batches of 32 tokens at 6,400 tokens
  // a second and of 2,048 at 20,480 (GatedBatcher's batches of at most
  // 1,000 tokens run at the 32-token batch's rate: 6,400).
  void Calibrate() {
    batcher_.Calibrate(2048, std::chrono::milliseconds(100));
    batcher_.Calibrate(32, std::chrono::milliseconds(5));
  }
  // `count` requests of one sequence of `tokens`, each admitted: the first
  // batch (one request or more) runs, held; the others queue.
  void SubmitEach(int count, int tokens) {
    for (int i = 0; i < count; ++i) {
      requests_.push_back(MakeRequest(requests_.size() + 1, {tokens}, Clock::now(), deadline_));
      ASSERT_TRUE(batcher_.Submit(requests_.back()).ok()) << requests_.size();
    }
    ASSERT_TRUE(engine_->Started(1));
  }
  // Precheck with `calls` not in the queue yet.
  Status Precheck(int64_t calls = 0) { return batcher_.Precheck(deadline_, 0, calls); }
  // Runs every request submitted and stops: the drops counted.
  std::map<std::string, int> Finish() {
    engine_->Release();
    for (const auto& request : requests_) EXPECT_TRUE(request->done().get().ok());
    batcher_.Stop();
    return drops_.Counts();
  }

  static void ExpectLate(const Status& refused) {
    EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.message();
    EXPECT_NE(refused.message().find("after its deadline"), std::string::npos) << refused.message();
  }

 private:
  DropCounter drops_;
  GateEngine* engine_ = nullptr;
  std::unique_ptr<DynamicBatcher> owned_;
  DynamicBatcher& batcher_;
  const Clock::time_point deadline_ = Clock::now() + std::chrono::seconds(60);
  std::vector<std::shared_ptr<InferenceRequest>> requests_;
};

// Calls admitted before they reach the queue (the guard's screen lets them
// through to gRPC) count as queued ahead of a new one, at the tokens of
// recent requests (RecentCallTokens): while gRPC falls behind, the queue
// itself looks short.
TEST_F(PrecheckTest, CountsCallsNotInTheQueueYet) {
  Calibrate();
  // No request yet: nothing says what a call costs.
  EXPECT_TRUE(Precheck(1000000).ok());
  SubmitEach(RecentCallTokens::kCalls, 100);
  // A million calls of 100 tokens (about 15,600 s) are refused against a
  // minute.
  ExpectLate(Precheck(1000000));
  // Nothing but the queue ahead (2,000 tokens with the one running), or 10
  // calls more: admitted.
  EXPECT_TRUE(Precheck().ok());
  EXPECT_TRUE(Precheck(10).ok());
  // 30,000 calls of 100 tokens (about 470 s) are refused: the calls count
  // at the tokens of a request (as one token each they would be 5 s, and
  // admitted).
  ExpectLate(Precheck(30000));
  EXPECT_EQ(Finish(), (std::map<std::string, int>{{"m/refused_predicted_late", 2}}));
}

// The calls inside gRPC count at the last 20 requests, where a large first
// request weighs no more than the others: one large request, then small
// ones. Before, the tokens per request started at the first request's 1,000
// and moved 5% a request (364 after 20 of 10 tokens), and 2,000 small calls
// inside gRPC were predicted at 114 s, and refused against a minute.
TEST_F(PrecheckTest, PricesCallsAtTheLastRequestsNotTheFirst) {
  Calibrate();
  SubmitEach(1, 1000);
  // All it has seen: 2,000 calls of 1,000 tokens, about 310 s.
  ExpectLate(Precheck(2000));
  SubmitEach(RecentCallTokens::kCalls, 10);
  // 2,000 calls of 10 tokens behind about 1,200 queued or running: 3 s.
  const Status admitted = Precheck(2000);
  EXPECT_TRUE(admitted.ok()) << admitted.message();
  EXPECT_EQ(Finish(), (std::map<std::string, int>{{"m/refused_predicted_late", 1}}));
}

// A batcher calibrated before any call (served_model.cc times a batch of
// each size at load) predicts from the first call: behind a million calls
// of 100 tokens (batches of at most 1,000 tokens, at the 32-token batch's
// rate of 6,400 tokens a second), a call with a minute is refused and one
// with nothing but the running batch ahead admitted. Uncalibrated it
// admitted everything until its first batch ended.
TEST_F(PrecheckTest, ACalibratedBatcherPredictsFromTheFirstCall) {
  SubmitEach(1, 100);  // 100 tokens a call from now on
  // Not calibrated, and no batch has ended: nothing is predicted.
  EXPECT_TRUE(Precheck(1000000).ok());
  Calibrate();
  EXPECT_TRUE(Precheck().ok());
  ExpectLate(Precheck(1000000));
  EXPECT_EQ(Finish(), (std::map<std::string, int>{{"m/refused_predicted_late", 1}}));
}

// max_batch_time_us bounds the batches the batcher forms by the throughput it
// learned: a first batch of 100 tokens held for at least 20 ms (at most 5,000
// tokens a second) makes the next batch at most 20 tokens (4 ms), though 50
// are queued and max_batch_tokens is 1,000.
TEST(DynamicBatcherTest, BatchesAreBoundedByTheirPredictedTime) {
  DropCounter drops;
  GateEngine* engine = nullptr;
  BatchLimits limits = Limits(1000, 100, 0);
  limits.max_batch_time_us = 4000;
  std::unique_ptr<DynamicBatcher> owned = GatedBatcher(&drops, &engine, limits);
  DynamicBatcher& batcher = *owned;
  auto first = MakeRequest(1, {100}, Clock::now());
  ASSERT_TRUE(batcher.Submit(first).ok());
  ASSERT_TRUE(engine->Started(1));
  std::vector<std::shared_ptr<InferenceRequest>> queued;
  for (uint64_t id = 2; id <= 6; ++id) {
    queued.push_back(MakeRequest(id, {10}, Clock::now()));
    ASSERT_TRUE(batcher.Submit(queued.back()).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  engine->Release();
  ASSERT_TRUE(first->done().get().ok());
  for (const auto& r : queued) EXPECT_TRUE(r->done().get().ok());
  const std::vector<int64_t> tokens = engine->BatchTokens();
  ASSERT_GE(tokens.size(), 3u);  // 100, then at most 20 of the 50
  EXPECT_EQ(tokens[0], 100);
  EXPECT_GE(tokens[1], 10);
  EXPECT_LE(tokens[1], 20);
  batcher.Stop();
}

// The callback API answers a call from the request's on-finish callback:
// it runs once per request, with the request's status, and never under the
// batcher's lock (here it calls back into the batcher, which would deadlock).
// gRPC's deadline timer has millisecond granularity and may cancel a call a
// hair before the request's deadline, and the client's deadline passes
// before the server's by the call's transit (its cancel then arrives
// early): such a cancel is the deadline's (DEADLINE_EXCEEDED,
// deadline_in_queue), not the client's. Seen in e2e_reliability as a
// deadline counted as cancelled_in_queue: 1 ms early, and again under
// AddressSanitizer (2026-12-01) over 5 ms early.
TEST(InferenceRequestTest, ACancelAtTheDeadlineTimersGranularityIsTheDeadlines) {
  auto r = MakeRequest(1, {2}, kT0, kT0 + std::chrono::milliseconds(200));
  EXPECT_TRUE(r->DeadlineReachedAt(kT0 + std::chrono::milliseconds(200)));
  EXPECT_TRUE(r->DeadlineReachedAt(kT0 + std::chrono::microseconds(199'300)));
  EXPECT_TRUE(r->DeadlineReachedAt(kT0 + std::chrono::milliseconds(170)));
  EXPECT_FALSE(r->DeadlineReachedAt(kT0 + std::chrono::milliseconds(140)));
  EXPECT_FALSE(r->DeadlineReachedAt(kT0 + std::chrono::milliseconds(100)));
  // A call of 20 ms: the last quarter of its time (5 ms) only, so that a
  // client's own cancel of a short call is still its own.
  auto short_call = MakeRequest(3, {2}, kT0, kT0 + std::chrono::milliseconds(20));
  EXPECT_TRUE(short_call->DeadlineReachedAt(kT0 + std::chrono::milliseconds(16)));
  EXPECT_FALSE(short_call->DeadlineReachedAt(kT0 + std::chrono::milliseconds(14)));
  EXPECT_FALSE(MakeRequest(2, {2}, kT0, kNever)->DeadlineReachedAt(kT0 + std::chrono::hours(1)));
}

// A call's deadline was now + its timeout on the steady clock, which
// wrapped into the past for timeouts gRPC allows (up to 99,999,999 hours,
// read as nanoseconds' most; from 2,562,024 hours on a host up for a day),
// so such calls failed at once with DEADLINE_EXCEEDED. Past the clock's
// range there is no deadline.
TEST(InferenceRequestTest, ATimeoutBeyondTheClocksRangeIsNoDeadline) {
  const Clock::time_point day_up = Clock::time_point(std::chrono::hours(24));
  EXPECT_EQ(DeadlineAfter(day_up, std::chrono::hours(2'562'024)), Clock::time_point::max());
  EXPECT_EQ(DeadlineAfter(day_up, std::chrono::hours(2'562'047)), Clock::time_point::max());
  EXPECT_EQ(DeadlineAfter(day_up, std::chrono::nanoseconds::max()), Clock::time_point::max());
  EXPECT_EQ(DeadlineAfter(day_up, std::chrono::seconds(10)), day_up + std::chrono::seconds(10));
  EXPECT_EQ(DeadlineAfter(day_up, std::chrono::hours(1'000'000)),
            day_up + std::chrono::hours(1'000'000));
  EXPECT_EQ(DeadlineAfter(day_up, -std::chrono::seconds(1)), day_up - std::chrono::seconds(1));
}

TEST(DynamicBatcherTest, TheFinishCallbackRunsOnceOutsideTheBatchersLock) {
  std::vector<std::unique_ptr<BatchEngine>> replicas;
  auto gate = std::make_unique<GateEngine>();
  GateEngine* engine = gate.get();
  replicas.push_back(std::move(gate));
  DynamicBatcher batcher(Limits(1000, 100, 0), PackingRule{}, std::move(replicas));
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::vector<StatusCode>> finished;
  auto watch = [&](const std::shared_ptr<InferenceRequest>& r) {
    r->SetOnFinish([&, id = r->id()](const Status& status) {
      (void)batcher.Precheck(Clock::time_point::max());  // takes the batcher's lock
      std::lock_guard<std::mutex> lock(mu);
      finished[id].push_back(status.code());
      cv.notify_all();
    });
  };
  auto running = MakeRequest(1, {2}, Clock::now());
  auto queued = MakeRequest(2, {2}, Clock::now());
  watch(running);
  watch(queued);
  ASSERT_TRUE(batcher.Submit(running).ok());
  ASSERT_TRUE(engine->Started(1));
  ASSERT_TRUE(batcher.Submit(queued).ok());
  EXPECT_TRUE(batcher.Abandon(queued, Cancelled("client left")));   // from this thread
  EXPECT_FALSE(batcher.Abandon(queued, Cancelled("client left")));  // finished: no 2nd call
  engine->Release();                                                // the executor completes
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return finished.size() == 2; }));
  EXPECT_EQ(finished[1], std::vector<StatusCode>{StatusCode::kOk});
  EXPECT_EQ(finished[2], std::vector<StatusCode>{StatusCode::kCancelled});
  lock.unlock();
  batcher.Stop();
}

TEST(DynamicBatcherTest, StopFailsQueuedWorkAndRejectsNewWork) {
  std::vector<std::unique_ptr<BatchEngine>> replicas;
  replicas.push_back(std::make_unique<EchoEngine>());
  // A delay long enough that the single small request stays queued.
  DynamicBatcher batcher(Limits(1000, 100, 60'000'000), PackingRule{}, std::move(replicas));
  auto r = MakeRequest(1, {2}, Clock::now());
  ASSERT_TRUE(batcher.Submit(r).ok());
  batcher.Stop();
  EXPECT_EQ(r->done().get().code(), StatusCode::kUnavailable);
  EXPECT_EQ(batcher.Submit(MakeRequest(2, {1}, Clock::now())).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace encoderd::server
