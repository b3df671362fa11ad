#include "server/core/cancellation_watcher.h"

#include <algorithm>
#include <utility>

namespace encoderd::server {

CancellationWatcher::CancellationWatcher(std::chrono::milliseconds interval,
                                         int64_t max_checks_per_second)
    : interval_(interval),
      max_checks_per_second_(max_checks_per_second),
      thread_([this] { Run(); }) {}

CancellationWatcher::~CancellationWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

CancellationWatcher::Watch CancellationWatcher::Add(std::function<bool()> is_cancelled,
                                                    std::function<void()> on_cancel) {
  uint64_t id;
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_id_++;
    first = entries_.empty();
    entries_.emplace(id, Entry{std::move(is_cancelled), std::move(on_cancel)});
  }
  if (first) cv_.notify_one();  // the thread sleeps while nothing is watched
  return Watch(this, id);
}

void CancellationWatcher::Unwatch(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(id);
}

size_t CancellationWatcher::watched() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::chrono::microseconds CancellationWatcher::Pause(size_t watched) const {
  const auto budget =
      std::chrono::microseconds(static_cast<int64_t>(watched) * 1000000 / max_checks_per_second_);
  return std::max<std::chrono::microseconds>(interval_, budget);
}

void CancellationWatcher::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !entries_.empty(); });
    if (stop_) return;
    // A sweep over 1,000 calls takes ~1 ms; the lock is let go every
    // kChunk entries so that handlers adding or ending a watch wait for at
    // most one chunk.
    constexpr int kChunk = 64;
    uint64_t next = 0;
    while (!stop_) {
      auto it = entries_.lower_bound(next);
      for (int n = 0; n < kChunk && it != entries_.end(); ++n) {
        if (it->second.is_cancelled()) {
          it->second.on_cancel();
          it = entries_.erase(it);
        } else {
          ++it;
        }
      }
      if (it == entries_.end()) break;
      next = it->first;
      lock.unlock();
      lock.lock();
    }
    cv_.wait_for(lock, Pause(entries_.size()), [this] { return stop_; });
  }
}

}  // namespace encoderd::server
