#include "server/core/admission_policy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <string>

namespace encoderd::server {
namespace {

// Weight of the newest batch in the averages: about the last 10 batches count.
constexpr double kNewest = 0.1;

// Longest time predicted (a year): beyond it every deadline is missed anyway,
// and a longer one could overflow the clock's nanoseconds.
constexpr double kLongestSeconds = 365.0 * 24 * 3600;

// `d` at a pace `factor` times slower, held under a year.
Clock::duration AtPace(Clock::duration d, double factor) {
  return FromSeconds(Seconds(d) * factor);
}

int64_t Millis(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Clock::duration FromSeconds(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min(seconds, kLongestSeconds)));
}

int ThroughputEstimate::SizeClass(int64_t tokens) {
  int size_class = 0;
  while (size_class + 1 < kSizeClasses && tokens >= SizeClassFirst(size_class + 1)) ++size_class;
  return size_class;
}

void ThroughputEstimate::Observe(int64_t tokens, Clock::duration duration) {
  const double seconds = Seconds(duration);
  if (tokens <= 0 || seconds <= 0) return;
  batch_tokens_ = batch_tokens_ > 0
                      ? batch_tokens_ + kNewest * (static_cast<double>(tokens) - batch_tokens_)
                      : static_cast<double>(tokens);
  const int size_class = SizeClass(tokens);
  Rate& rate = rates_[size_class];
  // A batch predicted from another size's rate, or from the calibration's,
  // says nothing of the pace.
  if (!rate.known() || rate.calibrated) {
    rate = Rate{static_cast<double>(tokens), seconds};
    return;
  }
  paces_[size_class].Observe(seconds / (static_cast<double>(tokens) * rate.seconds / rate.tokens));
  rate.tokens += kNewest * (static_cast<double>(tokens) - rate.tokens);
  rate.seconds += kNewest * (seconds - rate.seconds);
}

void ThroughputEstimate::Calibrate(int64_t tokens, Clock::duration duration) {
  const double seconds = Seconds(duration);
  if (tokens <= 0 || seconds <= 0) return;
  Rate& rate = rates_[SizeClass(tokens)];
  if (!rate.known()) rate = Rate{static_cast<double>(tokens), seconds, /*calibrated=*/true};
}

bool ThroughputEstimate::known() const {
  return std::any_of(std::begin(rates_), std::end(rates_), [](const Rate& r) { return r.known(); });
}

void ThroughputEstimate::Paces::Observe(double pace) {
  ring[next] = pace;
  next = (next + 1) % kPaceWindow;
  known = std::min(known + 1, kPaceWindow);
  double sorted[kPaceWindow];
  std::copy(ring, ring + known, sorted);
  const int at = std::min(known - 1, static_cast<int>(std::ceil(kSlowQuantile * known)) - 1);
  std::nth_element(sorted, sorted + at, sorted + known);
  slow_factor = std::clamp(sorted[at], 1.0, kSlowestPace);
}

double ThroughputEstimate::slow_factor(int64_t batch_tokens) const {
  return paces_[SizeClass(batch_tokens)].slow_factor;
}

const ThroughputEstimate::Rate* ThroughputEstimate::RateFor(int64_t tokens) const {
  const int size_class = SizeClass(tokens);
  for (int c = size_class; c >= 0; --c)
    if (rates_[c].known()) return &rates_[c];
  for (int c = size_class + 1; c < kSizeClasses; ++c)
    if (rates_[c].known()) return &rates_[c];
  return nullptr;
}

double ThroughputEstimate::tokens_per_second(int64_t batch_tokens) const {
  const Rate* rate = RateFor(batch_tokens);
  return rate != nullptr ? rate->tokens / rate->seconds : 0;
}

Clock::duration ThroughputEstimate::Predict(int64_t tokens) const {
  const Rate* rate = RateFor(tokens);
  if (rate == nullptr || tokens <= 0) return Clock::duration::zero();
  return FromSeconds(static_cast<double>(tokens) * rate->seconds / rate->tokens);
}

Clock::duration ThroughputEstimate::PredictSlow(int64_t tokens) const {
  return AtPace(Predict(tokens), slow_factor(tokens));
}

int64_t ThroughputEstimate::TokensWithin(Clock::duration time) const {
  // Each size class has one rate, so within a class the predicted time grows
  // with the tokens; across classes it need not (a larger class may be
  // faster per token, or slower). The answer is the size before the first
  // one predicted to take longer than `time`, so that every batch up to it
  // is predicted within it.
  const double seconds = std::min(Seconds(time), kLongestSeconds);
  int64_t lower = 1;
  for (int c = 0; c < kSizeClasses; ++c) {
    const Rate* rate = RateFor(lower);
    if (rate == nullptr) return 0;
    const double fits = std::min(std::floor(seconds * rate->tokens / rate->seconds), 1e15);
    if (fits < static_cast<double>(lower)) return lower - 1;  // this class's first size is over
    const int64_t upper = SizeClassFirst(c + 1);
    if (c + 1 == kSizeClasses || fits < static_cast<double>(upper))
      return static_cast<int64_t>(fits);
    lower = upper;
  }
  return lower - 1;
}

void StandingQueue::ObserveBatch(Clock::duration newest_wait, Clock::duration target,
                                 Clock::time_point now, int64_t queued_tokens, int64_t growth) {
  if (queued_tokens >= queued_peak_ || now - peak_at_ > kInterval) {
    queued_peak_ = queued_tokens;
    peak_at_ = now;
  }
  if (standing_ && now - standing_since_ >= stand_for_) {
    standing_ = false;  // judged afresh from this batch on
    above_since_ = Clock::time_point::max();
    judged_afresh_at_ = now;
    limit_ = std::min(limit_, target);
  }
  // Soon after it was judged afresh, a refusal since says the overload goes
  // on, whatever the waits: the deadline rules hold a full queue under one
  // batch (the calls are late once it holds their slack less a batch), so
  // a batch takes all of it and its newest request has hardly waited.
  if (!standing_ && SoonAfterJudgement(now) && overflow_at_ > judged_afresh_at_) {
    Stand(now);
    return;
  }
  if (newest_wait <= target) {
    above_since_ = Clock::time_point::max();
    return;
  }
  if (above_since_ == Clock::time_point::max()) {
    above_since_ = now;
    queued_since_ = queued_peak_;
    stretch_peak_ = queued_peak_;
    grew_before_ = false;
  }
  stretch_peak_ = std::max(stretch_peak_, queued_tokens);
  if (standing_ || now - above_since_ < kInterval) return;
  const bool grew = queued_tokens - queued_since_ >= growth;
  // A refusal counts within this interval, which lasts until the first batch
  // after kInterval (longer when batches are slow).
  const bool overflowed = overflow_at_ != Clock::time_point::min() &&
                          now - overflow_at_ <= std::max(kInterval, now - above_since_);
  if (overflowed || (grew && grew_before_)) {
    Stand(now);
    return;
  }
  // Not yet an overload: judge the next interval afresh, so that growth is
  // counted over one interval and not from the start of a stretch that a
  // closed loop never ends, and from the most the queue held in the stretch:
  // a queue that grows as an overload's does holds the most at its latest
  // batch, while a closed loop's refills only return it to where it was.
  above_since_ = now;
  queued_since_ = stretch_peak_;
  grew_before_ = grew;
}

void StandingQueue::Stand(Clock::time_point now) {
  stand_for_ = SoonAfterJudgement(now) ? std::min<Clock::duration>(2 * stand_for_, kLongestStand)
                                       : kFirstStand;
  standing_ = true;
  standing_since_ = now;
}

void StandingQueue::ObserveIdle() {
  above_since_ = Clock::time_point::max();
  queued_peak_ = 0;
  standing_ = false;
  stand_for_ = kFirstStand;
  judged_afresh_at_ = Clock::time_point::min();
  limit_ = Clock::duration::max();
}

Clock::duration OverloadQueueTime(const AdmissionLimits& limits,
                                  const ThroughputEstimate& estimate) {
  return std::max<Clock::duration>(std::chrono::microseconds(limits.overload_queue_time_us),
                                   estimate.Predict(estimate.batch_tokens()));
}

void RecentCallTokens::Add(int64_t tokens) {
  int64_t& slot = ring_[seen_ % kCalls];
  sum_ += tokens - slot;
  slot = tokens;
  ++seen_;
}

double RecentCallTokens::PerCall() const {
  if (seen_ == 0) return 0;
  return static_cast<double>(sum_) / static_cast<double>(std::min<int64_t>(seen_, kCalls));
}

namespace {

// The batches ahead of a new call and the one it would ride in (see
// PredictedWait and PredictedFinish): batches of `queue_batch` tokens, and
// whether its own starts at once (an executor is free and no full batch is
// queued).
struct OwnBatch {
  int64_t queue_batch = 1;
  int64_t full_batches_queued = 0;
  int64_t tokens = 0;
  bool starts_now = false;
};

OwnBatch PlanOwnBatch(const Backlog& backlog, int64_t tokens, const ThroughputEstimate& estimate) {
  const int64_t recent = std::max<int64_t>(estimate.batch_tokens(), 1);
  const int64_t cap = std::max<int64_t>(backlog.max_batch_tokens, 1);
  OwnBatch own;
  // A free executor takes the queue at once, up to the cap; a busy one, when
  // it frees, what has queued by then.
  own.queue_batch =
      backlog.idle_executors > 0 ? cap : std::max(recent, std::min(backlog.queued_tokens, cap));
  own.full_batches_queued = backlog.queued_tokens / own.queue_batch;
  const int64_t rest = backlog.queued_tokens - own.full_batches_queued * own.queue_batch;
  own.starts_now = backlog.idle_executors > 0 && own.full_batches_queued == 0;
  own.tokens = own.starts_now ? backlog.queued_tokens + tokens : std::max(recent, rest + tokens);
  return own;
}

// The wait before a call's own batch starts, and that batch's duration, at
// the estimate's average pace; and when the call finishes with the running
// work and its own batch each at the pace of the slower recent batches of
// its size (slow_factor). The full batches queued ahead keep the average:
// several rarely all run slow, and under ASan, a queue of about 15 s of such
// batches taken at up to twice that had calls with 30 s deadlines refused.
struct Prediction {
  Clock::duration wait{};
  Clock::duration own_batch{};
  Clock::duration own_batch_slow{};
  Clock::duration slow_finish{};
  // The own batch's slow factor, for the refusal.
  double own_slow_factor = 1;
  // The size of batch the refusal's rate is quoted for: of those ahead, or
  // its own when it starts at once.
  int64_t queue_batch = 1;
};

Prediction PredictCall(const Backlog& backlog, int64_t tokens, const ThroughputEstimate& estimate) {
  const OwnBatch own = PlanOwnBatch(backlog, tokens, estimate);
  Prediction p;
  p.queue_batch = own.starts_now ? own.tokens : own.queue_batch;
  p.own_batch = estimate.Predict(own.tokens);
  p.own_slow_factor = estimate.slow_factor(own.tokens);
  p.own_batch_slow = AtPace(p.own_batch, p.own_slow_factor);
  // In seconds: a queue counted from calls still in gRPC has no bound of
  // its own, and FromSeconds holds it under a year.
  double full_batches = 0;
  double running = 0;
  double running_pace = 1;  // of an executor's batch of the running work
  if (!own.starts_now) {
    // The executors share the running work and take the full batches ahead
    // a round at a time (one batch runs on one executor).
    const int64_t executors = std::max(backlog.executors, 1);
    const int64_t rounds = (own.full_batches_queued + executors - 1) / executors;
    full_batches = static_cast<double>(rounds) * Seconds(estimate.Predict(own.queue_batch));
    running =
        Seconds(estimate.Predict(backlog.running_tokens)) / 2 / static_cast<double>(executors);
    running_pace = estimate.slow_factor(backlog.running_tokens / executors);
  }
  p.wait = FromSeconds(full_batches + running);
  p.slow_finish = FromSeconds(full_batches + running * running_pace) + p.own_batch_slow;
  return p;
}

}  // namespace

Clock::duration PredictedWait(const Backlog& backlog, const ThroughputEstimate& estimate) {
  return PredictCall(backlog, 0, estimate).wait;
}

Clock::time_point PredictedFinish(const Backlog& backlog, int64_t tokens, Clock::time_point now,
                                  const ThroughputEstimate& estimate) {
  return now + PredictCall(backlog, tokens, estimate).slow_finish;
}

Status Admit(const Backlog& backlog, int64_t tokens, Clock::time_point deadline,
             Clock::time_point now, const ThroughputEstimate& estimate,
             const AdmissionLimits& limits, AdmitVerdict* verdict) {
  AdmitVerdict ignored;
  AdmitVerdict& v = verdict != nullptr ? *verdict : ignored;
  v = AdmitVerdict{};
  if (!estimate.known()) return Status::Ok();
  // Planned once: this runs for every call, under the batcher's lock.
  const Prediction predicted = PredictCall(backlog, tokens, estimate);
  const Clock::duration wait = predicted.wait;
  const Clock::time_point finish = now + predicted.slow_finish;
  // Built only for a refusal: admitting costs no strings.
  const auto backlog_text = [&] {
    return std::to_string(backlog.queued_tokens) + " tokens queued ahead, " +
           std::to_string(backlog.running_tokens) + " running, at " +
           std::to_string(static_cast<int64_t>(estimate.tokens_per_second(predicted.queue_batch))) +
           " tokens/s";
  };
  const auto pace_text = [&] {
    const int64_t over = std::llround((predicted.own_slow_factor - 1) * 100);
    return over > 0 ? ", its batch at the pace of the slowest tenth of recent batches of its "
                      "size, " +
                          std::to_string(over) + "% over the average"
                    : std::string();
  };
  // Predicted only where a rule needs it: most calls are admitted.
  const auto overload_queue_time = [&] {
    return std::min(OverloadQueueTime(limits, estimate), backlog.standing_limit);
  };
  if (backlog.standing && limits.overload_queue_time_us > 0) {
    const Clock::duration longest = overload_queue_time();
    if (wait > longest) {
      v.refusal = Refusal::kStandingQueue;
      return ResourceExhausted(
          "overloaded: the call would wait " + std::to_string(Millis(wait)) +
          " ms in a queue that has stood for over " +
          std::to_string(Millis(StandingQueue::kInterval)) + " ms; under sustained overload " +
          "calls wait at most " + std::to_string(Millis(longest)) +
          " ms (overload_queue_time_us, or one batch) (" + backlog_text() + "); retry later");
    }
  }
  if (deadline != Clock::time_point::max()) {
    if (limits.predict_deadlines && finish > deadline) {
      v.refusal = Refusal::kPredictedLate;
      // Late for the queue ahead, not for its own batch, and with more
      // slack than a standing queue allows.
      v.shows_overload =
          now + predicted.own_batch_slow <= deadline && deadline - now > overload_queue_time();
      return ResourceExhausted(
          "overloaded: the call would finish in " + std::to_string(Millis(finish - now)) +
          " ms, after its deadline in " + std::to_string(Millis(deadline - now)) + " ms (" +
          backlog_text() + pace_text() + "); retry later or with a longer deadline");
    }
    return Status::Ok();
  }
  if (limits.max_queue_time_us > 0 && wait > std::chrono::microseconds(limits.max_queue_time_us)) {
    v.refusal = Refusal::kQueueTime;
    v.shows_overload = std::chrono::microseconds(limits.max_queue_time_us) > overload_queue_time();
    return ResourceExhausted("overloaded: the call would wait " + std::to_string(Millis(wait)) +
                             " ms in the queue, more than max_queue_time_us allows (" +
                             backlog_text() + "); retry later");
  }
  return Status::Ok();
}

}  // namespace encoderd::server
