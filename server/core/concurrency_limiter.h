// Caps how many inference calls the server works on at once. Each admitted
// call holds a Slot until it returns; a call that finds every slot taken is
// refused at once (RESOURCE_EXHAUSTED) instead of queuing a thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace encoderd::server {

class ConcurrencyLimiter {
 public:
  // A held slot; releases it when destroyed. Empty (held() == false) when
  // the limiter was full.
  class Slot {
   public:
    Slot(Slot&& other) noexcept : owner_(other.owner_) { other.owner_ = nullptr; }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot& operator=(Slot&&) = delete;
    ~Slot() {
      if (owner_ == nullptr) return;
      owner_->in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      held_total_.fetch_sub(1, std::memory_order_relaxed);
    }
    bool held() const { return owner_ != nullptr; }

   private:
    friend class ConcurrencyLimiter;
    explicit Slot(ConcurrencyLimiter* owner) : owner_(owner) {}
    ConcurrencyLimiter* owner_;
  };

  // `limit` <= 0 means no limit.
  explicit ConcurrencyLimiter(int64_t limit) : limit_(limit) {}

  // Thread-safe. Exactly `limit` concurrent callers get a held slot.
  Slot TryAcquire() {
    const int64_t before = in_flight_.fetch_add(1, std::memory_order_acq_rel);
    if (limit_ > 0 && before >= limit_) {
      in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      return Slot(nullptr);
    }
    held_total_.fetch_add(1, std::memory_order_relaxed);
    return Slot(this);
  }
  int64_t in_flight() const { return in_flight_.load(std::memory_order_acquire); }
  int64_t limit() const { return limit_; }
  // Slots held now, summed over every limiter of the process (for the
  // scrape-time gauge; the daemon has one limiter).
  static int64_t HeldInProcess() { return held_total_.load(std::memory_order_relaxed); }

 private:
  const int64_t limit_;
  std::atomic<int64_t> in_flight_{0};
  static inline std::atomic<int64_t> held_total_{0};
};

}  // namespace encoderd::server
