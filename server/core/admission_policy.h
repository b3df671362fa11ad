// Overload control as pure functions of the queue, the clock and the
// throughput measured on this machine, consulted by the batcher like
// batch_policy.h (tests drive them with a fake clock): a call is admitted only
// when it is predicted to finish before its deadline (or, without one, to
// wait less than max_queue_time_us), so that under any overload the queue
// holds only work that can still succeed and the excess is refused at once.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>

#include "core/status.h"
#include "server/core/inference_request.h"

namespace encoderd::server {

// `d` in seconds; and seconds as a duration, held under a year (a longer one
// could overflow the clock's nanoseconds).
double Seconds(Clock::duration d);
Clock::duration FromSeconds(double seconds);

// Tokens a second one executor of a model computes, learned from the batches
// it ran, for each size of batch: exponentially weighted averages of a
// batch's tokens and seconds per size class (their ratio weighs large batches
// of a class by their size). A batch's fixed cost (dispatch, waking threads)
// weighs on small batches, so one rate learned from small batches predicted
// a long queue, which the batcher runs in large batches, many times too slow
// (30 s for a few seconds of work, and calls with 30 s deadlines refused).
// A size never seen takes the rate of the nearest smaller size seen, which
// is rarely faster per token, or else of the nearest larger. Not thread-safe: the
// batcher guards it with its lock.
class ThroughputEstimate {
 public:
  // One batch of `tokens` took `duration`.
  void Observe(int64_t tokens, Clock::duration duration);
  // One batch of `tokens` took `duration` before any call came (the model's
  // calibration at load, calibration.h): the rate of its size class, if it
  // has none yet, without a recent batch size or a pace. It stands until the
  // first batch of calls of that class, which replaces it and is not paced
  // against it: a calibration batch runs alone, in sequences of one length,
  // its fastest run kept, and calls' batches judged against it read slow
  // for the next kPaceWindow batches. Without it a new daemon knows only
  // the sizes its first calls made: a size never run takes a smaller size's
  // rate, whose fixed cost per token made a first burst of large batches
  // look many times too slow (under ASan, 7,026 tokens queued predicted at
  // 31 s at 223 tokens/s, where they ran in about 4 s, and calls with 30 s
  // deadlines were refused), and until a batch has run nothing is
  // predicted, so a call behind a long first batch is admitted
  // and misses its deadline.
  void Calibrate(int64_t tokens, Clock::duration duration);
  // False until a batch was observed or calibrated: nothing can be predicted.
  bool known() const;
  // Tokens a second in batches of `batch_tokens` (0 while unknown).
  double tokens_per_second(int64_t batch_tokens) const;
  // Tokens of a recent batch, of any size (the weighted average; 0 until a
  // batch was observed).
  int64_t batch_tokens() const { return static_cast<int64_t>(batch_tokens_); }
  // Predicted time for one executor to compute a batch of `tokens` (zero
  // while unknown).
  Clock::duration Predict(int64_t tokens) const;
  // The most tokens a batch predicted to take at most `time` holds (0 when
  // not even one token fits, or while unknown).
  int64_t TokensWithin(Clock::duration time) const;
  // How much slower than predicted recent batches of the size of
  // `batch_tokens` ran: of the last kPaceWindow batches of its size class
  // predicted at that class's own rate, the time each took over the time
  // predicted for it, at the kSlowQuantile quantile; at least 1 and at most
  // kSlowestPace (with ten batches or fewer paced, the slowest of them), and
  // 1 for a size class with no batch paced.
  // Deadlines are judged at that pace: under overload the queue fills until
  // the oldest call of each batch is due just as the batch is predicted to
  // end, and a batch that ran a few percent slow made its oldest calls late
  // after they were computed (docs/reliability.md, "Deadlines at the slower
  // pace"). Each size is paced apart: a pause of a few milliseconds is
  // several times a small batch's prediction and a few percent of a large
  // one's.
  double slow_factor(int64_t batch_tokens) const;
  // Predict(tokens) at slow_factor(tokens): about one batch in ten of that
  // size takes longer.
  Clock::duration PredictSlow(int64_t tokens) const;

  // Size classes: batches of under 64, 256, 1,024, 4,096 tokens, and more.
  static constexpr int kSizeClasses = 5;
  // The fewest tokens of a batch of size class `size_class` (0 to
  // kSizeClasses - 1): 1, 64, 256, 1,024, 4,096.
  static int64_t SizeClassFirst(int size_class) {
    return size_class == 0 ? 1 : int64_t{16} << (2 * size_class);
  }
  // The size class of a batch of `tokens`.
  static int SizeClass(int64_t tokens);
  static constexpr int kPaceWindow = 64;
  static constexpr double kSlowQuantile = 0.9;
  // A margin for batches more than twice as slow as predicted is the rate's
  // to learn, not the margin's.
  static constexpr double kSlowestPace = 2;

 private:
  struct Rate {
    double tokens = 0;
    double seconds = 0;
    // From Calibrate: the first batch of calls of its size replaces it.
    bool calibrated = false;
    bool known() const { return tokens > 0 && seconds > 0; }
  };
  // The rate a batch of `tokens` is predicted at; nullptr while unknown.
  const Rate* RateFor(int64_t tokens) const;
  // The last kPaceWindow batches of a size class: their time over their
  // prediction (a ring), and its slow factor.
  struct Paces {
    double ring[kPaceWindow] = {};
    int known = 0;
    int next = 0;
    double slow_factor = 1;
    // A batch took `pace` times its prediction.
    void Observe(double pace);
  };

  Rate rates_[kSizeClasses];
  Paces paces_[kSizeClasses];
  double batch_tokens_ = 0;
};

// The tokens a call not tokenized yet is counted at
// (DynamicBatcher::Precheck counts the calls inside gRPC so): the mean of
// the last kCalls requests admitted (of all of them while fewer were), none
// before the first. An average that started at the first request and moved
// 5% a request kept a large first request's size for dozens of requests (a
// burst of small calls after one large one was priced at the large one's
// size: 364 tokens a call after one of 1,000 and 20 of 10). Calls of one
// size are priced as that average priced them; counting the first few at
// the smallest request seen did no better or worse in bursts
// (`loadtest/scripts/burst.py [--cold] --rate 1100`, docs/reliability.md).
// Not thread-safe: the batcher guards it with its lock.
class RecentCallTokens {
 public:
  static constexpr int kCalls = 20;
  void Add(int64_t tokens);
  double PerCall() const;

 private:
  int64_t ring_[kCalls] = {};
  int64_t seen_ = 0;
  int64_t sum_ = 0;  // of ring_
};

struct AdmissionLimits {
  // Refuse a call whose predicted finish is after its deadline.
  bool predict_deadlines = true;
  // Refuse a call without a deadline whose predicted wait in the queue is
  // longer than this; 0: no limit.
  int64_t max_queue_time_us = 0;
  // While the queue stands (StandingQueue: sustained overload, not a burst),
  // refuse a call predicted to wait longer than this or than one recent
  // batch, whichever is longer, whatever its deadline; 0: off.
  int64_t overload_queue_time_us = 0;
};

// CoDel's test for overload (Nichols and Jacobson, "Controlling Queue
// Delay"), on batches: the queue stands when, for a whole interval, every
// batch was formed with requests that had all waited longer than a target
// (a burst drains within the interval; overload does not), and the calls
// have outgrown what the server or their callers accept: in each of the
// last two intervals the queue grew by half a batch or more past the most
// it held before the interval (in the stretch's first interval, the most a
// batch left within the interval before it; a closed loop's queue, bounded
// by its callers, can pass its highest once, as they start or as the ones
// that lagged call again, but cannot keep on growing), or within it the
// deadline rules refused a call whose own deadline allowed more than the
// target (AdmitVerdict::shows_overload), or the server refused a call for
// want of a slot (max_concurrent_requests) or of room in the queue
// (max_queue_size).
// It stands until an executor finds nothing to do, or for stand_for() at
// most: then it is judged afresh, as on entry. Not thread-safe: the batcher
// guards it with its lock.
//
// Filling the queue up to each call's deadline keeps a sustained overload
// at the deadline's edge: answers come just before the deadline, and any
// batch slower than predicted makes calls miss it. A standing queue held
// short keeps the executors busy with calls that have slack. A queue that
// is long but neither grows nor turns calls away is not that: 64 clients
// each waiting for its call of 16 texts keep four batches queued for ever,
// and holding them to one batch (each refused client calls again at once)
// took goodput from 819 texts/s to 304, with 8,000 refusals a second
// (2-vCPU EPYC, docs/reliability.md). Nor is a burst at 70% load that
// drains within the callers' 30 s deadlines.
//
// Held short, a standing queue no longer shows whether the overload goes
// on: the clients a closed loop refuses call again at once, as an open
// loop's do not, and both are refused the same. So a queue that an
// executor never idles is judged afresh after standing kFirstStand: 64
// clients that kept calling after an overload ended are then served again
// instead of being refused for as long as they call. A sustained overload
// turns calls away again (within kFirstStand of the judgement that alone
// makes it stand again: a queue the deadline rules keep full is shorter
// than one batch, so its waits never read as standing) or grows again; but
// meanwhile the queue filled towards its callers' deadlines, and answers
// came at their edge until it drained. So a queue that stands again within
// kFirstStand of being judged afresh stands twice as long the next time, up
// to kLongestStand, like a backoff; an idle executor starts again from
// kFirstStand. And the wait a standing queue admits, one recent batch or
// more, is held to what it was when judged afresh (limit()): while the
// queue filled, the batches grew to full ones, and a limit of one full
// batch no longer held anything back (p99 of OK calls 800-870 ms at 3x
// with 1 s deadlines, for as long as the overload went on, against 340-420
// ms while it stood).
class StandingQueue {
 public:
  static constexpr Clock::duration kInterval = std::chrono::milliseconds(500);
  static constexpr Clock::duration kFirstStand = std::chrono::seconds(10);
  static constexpr Clock::duration kLongestStand = std::chrono::seconds(60);

  // A batch was formed at `now`; its newest request had waited
  // `newest_wait`, and `queued_tokens` were left in the queue. An interval
  // grew when that rose by `growth` tokens or more past the most held
  // before it; two in a row that grew make the queue stand.
  void ObserveBatch(Clock::duration newest_wait, Clock::duration target, Clock::time_point now,
                    int64_t queued_tokens, int64_t growth);
  // At `now` the deadline rules refused a call with more slack than the
  // target (AdmitVerdict::shows_overload), or the server one for want of a
  // slot or of room in the queue.
  void ObserveOverflow(Clock::time_point now) { overflow_at_ = std::max(overflow_at_, now); }
  // An executor was free and the queue empty: the server caught up.
  void ObserveIdle();
  bool standing() const { return standing_; }
  // How long the queue stands (or will, once it does) before it is judged
  // afresh.
  Clock::duration stand_for() const { return stand_for_; }
  // The most a standing queue admits since it was last judged afresh: the
  // target then (max() until then, and again once an executor idles).
  Clock::duration limit() const { return limit_; }

 private:
  // Stands from `now`, for twice as long as the last time when it was
  // judged afresh within kFirstStand.
  void Stand(Clock::time_point now);
  // Within kFirstStand of the last judgement afresh (none since an idle).
  bool SoonAfterJudgement(Clock::time_point now) const {
    return judged_afresh_at_ != Clock::time_point::min() && now - judged_afresh_at_ <= kFirstStand;
  }

  // Since when every batch's newest request waited longer than the target,
  // and the tokens an interval's growth counts from: at the stretch's start
  // the most left by a recent batch (queued_peak_), then the most left by
  // any batch of the stretch (stretch_peak_), so that a closed loop whose
  // callers were slow to call again, refilling the queue to where it was,
  // does not read as growth, however long the callers lag.
  Clock::time_point above_since_ = Clock::time_point::max();
  int64_t queued_since_ = 0;
  int64_t stretch_peak_ = 0;
  // The interval before the one being judged, in the same stretch, grew.
  bool grew_before_ = false;
  // The most tokens a batch left queued, by the batch at peak_at_: a later
  // batch that leaves as many replaces it, and so does any batch once it is
  // older than kInterval.
  int64_t queued_peak_ = 0;
  Clock::time_point peak_at_{};
  // The last refusal that showed the queue too long for its callers.
  Clock::time_point overflow_at_ = Clock::time_point::min();
  bool standing_ = false;
  Clock::time_point standing_since_;
  Clock::duration stand_for_ = kFirstStand;
  // When the queue was last judged afresh; min() since an executor idled.
  Clock::time_point judged_afresh_at_ = Clock::time_point::min();
  Clock::duration limit_ = Clock::duration::max();
};

// The work ahead of a new call.
struct Backlog {
  // Tokens waiting in the queue ahead of the call (with fair queuing, the
  // ones that go before it: RequestQueue::TokensAhead).
  int64_t queued_tokens = 0;
  // Tokens of the batches the executors are computing (half of it, on
  // average, is still to do).
  int64_t running_tokens = 0;
  // Executors sharing the work, and how many of them have nothing to run.
  int executors = 1;
  int idle_executors = 0;
  // Whether the queue stands (StandingQueue).
  bool standing = false;
  // Most tokens the batcher puts in one batch (BatchTokenCap: max_batch_tokens,
  // or fewer under max_batch_time_us).
  int64_t max_batch_tokens = std::numeric_limits<int64_t>::max();
  // StandingQueue::limit(): OverloadQueueTime is held to it.
  Clock::duration standing_limit = Clock::duration::max();
};

// The longest wait admitted while the queue stands: overload_queue_time_us,
// or one recent batch if that is longer (a shorter queue would starve the
// executors between batches).
Clock::duration OverloadQueueTime(const AdmissionLimits& limits,
                                  const ThroughputEstimate& estimate);

// How long a new call is predicted to wait before its own batch starts. Its
// answer comes when the batch holding it ends, so the queue counts in whole
// batches: the call waits for half of the running work and for the full
// batches queued before it; the tokens queued beyond those share its batch.
// (A prediction linear in the tokens ahead was up to one batch early, and
// calls admitted on it expired in the queue.) A batch is what the batcher
// takes when an executor is free: the whole queue up to max_batch_tokens, and
// when every executor is busy at least the recent batch size (calls keep
// coming until one frees). With an executor free and less than a full batch
// queued, it waits for nothing.
Clock::duration PredictedWait(const Backlog& backlog, const ThroughputEstimate& estimate);

// When a call of `tokens` submitted at `now` is predicted to finish: after
// the full batches queued ahead at the average pace, then the running work
// and its own batch, each at the pace of the slower recent batches of its
// size (ThroughputEstimate::slow_factor). Its own batch is what is queued
// beyond the full batches plus the call, when an executor is free for it;
// otherwise calls arriving meanwhile fill it up to at least the recent batch
// size.
Clock::time_point PredictedFinish(const Backlog& backlog, int64_t tokens, Clock::time_point now,
                                  const ThroughputEstimate& estimate);

// Which rule refused a call.
enum class Refusal { kNone, kPredictedLate, kQueueTime, kStandingQueue };

// What Admit decided, beyond its status.
struct AdmitVerdict {
  Refusal refusal = Refusal::kNone;
  // The refusal shows the queue longer than its callers accept
  // (StandingQueue::ObserveOverflow): the deadline rules refused a call
  // whose deadline left it more than OverloadQueueTime, and time for its own
  // batch, for the queue ahead of it (or, without a deadline,
  // max_queue_time_us is longer than OverloadQueueTime). The queue ahead
  // need not be longer than that: a full queue's calls are refused as late
  // once it holds their slack less a batch, which with 1 s deadlines on a
  // 2-vCPU VM is shorter than one batch. A call with a 1 ms deadline refused
  // says nothing about the queue, nor does one whose own batch outlasts its
  // deadline (a huge call into a short queue).
  bool shows_overload = false;
};

// OK, or RESOURCE_EXHAUSTED saying why (predicted finish against the
// deadline, predicted wait against OverloadQueueTime while the queue stands,
// or, without a deadline, against max_queue_time_us). Admits everything
// while the throughput is unknown.
Status Admit(const Backlog& backlog, int64_t tokens, Clock::time_point deadline,
             Clock::time_point now, const ThroughputEstimate& estimate,
             const AdmissionLimits& limits, AdmitVerdict* verdict = nullptr);

}  // namespace encoderd::server
