// Caps how many inference calls the server works on at once. Each admitted
// call holds a Slot until it returns; a call that finds every slot taken is
// refused at once (RESOURCE_EXHAUSTED) instead of queuing a thread.
//
// With fair sharing, the slots are shared between peers (client
// connections): the first three quarters go to whoever asks, the last
// quarter only to a peer holding none or fewer than limit / (k + 1), where k
// peers hold slots now (the one more is a peer yet to come). A client that
// floods the server on one connection takes at most three quarters of the
// slots, so another client always finds one, and when several flood, the
// last quarter goes to the ones under their share. A limiter may keep a
// reserve: a peer holding fewer than `reserve` (one by default) is never
// held to its share, only to the limit.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <unordered_map>

namespace encoderd::server {

class ConcurrencyLimiter {
 public:
  // A held slot; releases it when destroyed. Empty (held() == false) when
  // the limiter was full.
  class Slot {
   public:
    Slot(Slot&& other) noexcept : owner_(other.owner_), peer_(other.peer_) {
      other.owner_ = nullptr;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot& operator=(Slot&&) = delete;
    ~Slot() {
      if (owner_ != nullptr) owner_->Release(peer_);
    }
    bool held() const { return owner_ != nullptr; }

   private:
    friend class ConcurrencyLimiter;
    Slot(ConcurrencyLimiter* owner, uint64_t peer) : owner_(owner), peer_(peer) {}
    ConcurrencyLimiter* owner_;
    uint64_t peer_;
  };

  // What a limiter's slots stand for, summed by kind over the process for
  // the scrape-time gauges: calls in progress, or places among the answers
  // being sent (encoder_service.h).
  enum class Kind { kCalls = 0, kAnswersSending = 1 };

  // `limit` <= 0 means no limit (and nothing to share).
  explicit ConcurrencyLimiter(int64_t limit, bool fair_share = false, Kind kind = Kind::kCalls,
                              int64_t reserve = 1)
      : limit_(limit),
        fair_share_(fair_share && limit > 0),
        reserve_(reserve),
        held_total_(HeldTotal(kind)) {}

  // The places among the answers being sent, beside `max_calls` call slots
  // (encoder_service.cc, UnaryCall::Answer): twice as many, and a peer
  // holding fewer than two always gets one while any is free. A client that
  // calls again as soon as it has its answer may find its previous answer
  // still holding its place (gRPC has not run its OnDone yet); with a place
  // for that one and one for the new answer, max_calls such clients never
  // run out (with as many places as slots and a reserve of one, 8 such
  // clients under a cap of 8 could: e2e_serve's check_calls_after_answers
  // failed once in CI, 8 of 2,000 calls refused).
  static ConcurrencyLimiter ForAnswersSending(int64_t max_calls, bool fair_share) {
    const int64_t places = max_calls > std::numeric_limits<int64_t>::max() / 2
                               ? std::numeric_limits<int64_t>::max()
                               : 2 * max_calls;  // <= 0 (no limit) stays so
    return ConcurrencyLimiter(places, fair_share, Kind::kAnswersSending, /*reserve=*/2);
  }

  // Thread-safe. Exactly `limit` concurrent callers get a held slot; with
  // fair sharing, fewer when one `peer` asks for more than its share (then
  // *over_share, when given, is set).
  Slot TryAcquire(uint64_t peer = 0, bool* over_share = nullptr) {
    if (over_share != nullptr) *over_share = false;
    if (fair_share_) return TryAcquireShared(peer, over_share);
    const int64_t before = in_flight_.fetch_add(1, std::memory_order_acq_rel);
    if (limit_ > 0 && before >= limit_) {
      in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      return Slot(nullptr, peer);
    }
    held_total_.fetch_add(1, std::memory_order_relaxed);
    return Slot(this, peer);
  }
  int64_t in_flight() const { return in_flight_.load(std::memory_order_acquire); }
  // Slots `peer` holds now; with fair sharing off (no per-peer count), all
  // the slots held.
  int64_t held_by(uint64_t peer) {
    if (!fair_share_) return in_flight();
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = held_.find(peer);
    return it == held_.end() ? 0 : it->second;
  }
  int64_t limit() const { return limit_; }
  // Slots held now, summed over every limiter of `kind` in the process (the
  // daemon has one of each).
  static int64_t HeldInProcess(Kind kind = Kind::kCalls) {
    return HeldTotal(kind).load(std::memory_order_relaxed);
  }

 private:
  Slot TryAcquireShared(uint64_t peer, bool* over_share) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t total = in_flight_.load(std::memory_order_relaxed);
    if (total >= limit_) return Slot(nullptr, peer);
    if (total >= limit_ - limit_ / 4) {
      const auto it = held_.find(peer);
      const int64_t mine = it == held_.end() ? 0 : it->second;
      const int64_t share = limit_ / (static_cast<int64_t>(held_.size()) + 1);
      if (mine >= reserve_ && mine >= share) {
        if (over_share != nullptr) *over_share = true;
        return Slot(nullptr, peer);
      }
    }
    ++held_[peer];
    in_flight_.fetch_add(1, std::memory_order_acq_rel);
    held_total_.fetch_add(1, std::memory_order_relaxed);
    return Slot(this, peer);
  }
  void Release(uint64_t peer) {
    if (fair_share_) {
      // Under the lock, so that TryAcquireShared never sees a total that
      // counts a slot already given back.
      std::lock_guard<std::mutex> lock(mu_);
      auto it = held_.find(peer);
      if (--it->second == 0) held_.erase(it);
      in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    } else {
      in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    }
    held_total_.fetch_sub(1, std::memory_order_relaxed);
  }
  static std::atomic<int64_t>& HeldTotal(Kind kind) {
    static std::atomic<int64_t> totals[2];
    return totals[static_cast<int>(kind)];
  }

  const int64_t limit_;
  const bool fair_share_;
  const int64_t reserve_;             // a peer holding fewer is not held to its share
  std::atomic<int64_t>& held_total_;  // this limiter's kind's, in the process
  std::atomic<int64_t> in_flight_{0};
  std::mutex mu_;
  // With fair sharing: the slots each peer holds (peers holding none absent).
  std::unordered_map<uint64_t, int64_t> held_;
};

}  // namespace encoderd::server
