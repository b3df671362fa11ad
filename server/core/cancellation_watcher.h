// Watches the clients of calls waiting for their results. gRPC's synchronous
// API has no cancellation callback, so something must poll each call's
// IsCancelled(); one thread does it for every waiting call, so that a
// waiting handler sleeps until its result, its deadline or its cancellation
// instead of waking up to check (200 waiting calls polled by their own
// handlers cost ~12,700 wake-ups a second).
//
// Each check costs a few microseconds (gRPC plucks the call's completion
// queue), so the thread checks every call every `interval`, or less often
// when more than max_checks_per_second would be needed: a backlog of
// thousands of calls must not take the CPU its own results need.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace encoderd::server {

class CancellationWatcher {
 public:
  CancellationWatcher(std::chrono::milliseconds interval, int64_t max_checks_per_second);
  ~CancellationWatcher();  // stops and joins the thread
  CancellationWatcher(const CancellationWatcher&) = delete;
  CancellationWatcher& operator=(const CancellationWatcher&) = delete;

  // A watched call; unwatched when destroyed. Once destroyed, neither of its
  // functions runs again (nor is still running).
  class Watch {
   public:
    Watch(Watch&& other) noexcept : owner_(other.owner_), id_(other.id_) { other.owner_ = nullptr; }
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    Watch& operator=(Watch&&) = delete;
    ~Watch() {
      if (owner_) owner_->Unwatch(id_);
    }

   private:
    friend class CancellationWatcher;
    Watch(CancellationWatcher* owner, uint64_t id) : owner_(owner), id_(id) {}
    CancellationWatcher* owner_;
    uint64_t id_;
  };

  // Calls `is_cancelled` on the watcher's thread every interval until it
  // returns true, then `on_cancel` once (also on that thread), and stops
  // watching. Both run under the watcher's lock: they must be quick and must
  // not call back into the watcher.
  [[nodiscard]] Watch Add(std::function<bool()> is_cancelled, std::function<void()> on_cancel);

  size_t watched() const;

  // The pause after a sweep over `watched` calls: the interval, or longer so
  // that the checks stay within max_checks_per_second.
  std::chrono::microseconds Pause(size_t watched) const;

 private:
  struct Entry {
    std::function<bool()> is_cancelled;
    std::function<void()> on_cancel;
  };
  void Unwatch(uint64_t id);
  void Run();

  const std::chrono::milliseconds interval_;
  const int64_t max_checks_per_second_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Entry> entries_;
  uint64_t next_id_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace encoderd::server
