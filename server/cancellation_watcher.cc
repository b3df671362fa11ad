#include "server/cancellation_watcher.h"

#include <utility>

namespace encoderd::server {

CancellationWatcher::CancellationWatcher(std::chrono::milliseconds interval)
    : interval_(interval), thread_([this] { Run(); }) {}

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

void CancellationWatcher::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !entries_.empty(); });
    if (stop_) return;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.is_cancelled()) {
        it->second.on_cancel();
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
    cv_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

}  // namespace encoderd::server
