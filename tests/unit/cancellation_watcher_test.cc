#include "server/core/cancellation_watcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace encoderd::server {
namespace {

using std::chrono::milliseconds;

bool WaitFor(const std::function<bool()>& predicate, milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(CancellationWatcherTest, CallsOnCancelOnceWhenTheClientIsGone) {
  CancellationWatcher watcher(milliseconds(2), 1000000);
  std::atomic<bool> gone{false};
  std::atomic<int> checks{0}, cancels{0};
  auto watch = watcher.Add(
      [&] {
        ++checks;
        return gone.load();
      },
      [&] { ++cancels; });
  ASSERT_TRUE(WaitFor([&] { return checks >= 3; }, milliseconds(2000)));
  EXPECT_EQ(cancels, 0);
  gone = true;
  ASSERT_TRUE(WaitFor([&] { return cancels == 1; }, milliseconds(2000)));
  EXPECT_EQ(watcher.watched(), 0u);  // watched no more after the cancel
  const int checked = checks;
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(checks, checked);
  EXPECT_EQ(cancels, 1);
}

TEST(CancellationWatcherTest, NothingRunsAfterTheWatchIsDestroyed) {
  CancellationWatcher watcher(milliseconds(1), 1000000);
  std::atomic<int> after{0};
  for (int i = 0; i < 200; ++i) {
    auto alive = std::make_shared<std::atomic<bool>>(true);
    {
      auto watch = watcher.Add(
          [alive, &after] {
            if (!*alive) ++after;
            return false;
          },
          [] {});
      std::this_thread::sleep_for(std::chrono::microseconds(100 * (i % 20)));
    }
    *alive = false;  // the handler's context is gone from here on
  }
  std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(after, 0);
  EXPECT_EQ(watcher.watched(), 0u);
}

TEST(CancellationWatcherTest, ManyConcurrentWatchesEachCancelledExactlyOnce) {
  CancellationWatcher watcher(milliseconds(1), 1000000);
  constexpr int kThreads = 16, kPerThread = 50;
  std::atomic<int> cancels{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::atomic<bool> gone{(i + t) % 2 == 0};
        std::atomic<bool> cancelled{false};
        auto watch = watcher.Add([&] { return gone.load(); },
                                 [&] {
                                   cancelled = true;
                                   ++cancels;
                                 });
        if (gone && !WaitFor([&] { return cancelled.load(); }, milliseconds(2000))) {
          ADD_FAILURE() << "a cancelled watch was not seen in 2 s";
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(cancels, kThreads * kPerThread / 2);
  EXPECT_EQ(watcher.watched(), 0u);
}

TEST(CancellationWatcherTest, SweepsMoreWatchesThanOneChunk) {
  // The sweep lets its lock go between chunks of entries: every entry is
  // still checked, including those past the first chunks.
  CancellationWatcher watcher(milliseconds(1), 1000000);
  constexpr int kWatches = 300;
  std::vector<std::atomic<bool>> gone(kWatches);
  std::vector<std::atomic<int>> cancels(kWatches);
  std::vector<CancellationWatcher::Watch> watches;
  for (int i = 0; i < kWatches; ++i) {
    watches.push_back(
        watcher.Add([&gone, i] { return gone[i].load(); }, [&cancels, i] { ++cancels[i]; }));
  }
  for (int i = 6; i < kWatches; i += 7) gone[i] = true;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int i = 6; i < kWatches; i += 7)
          if (cancels[i] == 0) return false;
        return true;
      },
      milliseconds(2000)));
  for (int i = 0; i < kWatches; ++i) EXPECT_EQ(cancels[i], i % 7 == 6 ? 1 : 0) << i;
  EXPECT_EQ(watcher.watched(), static_cast<size_t>(kWatches - kWatches / 7));
}

TEST(CancellationWatcherTest, ChecksStayWithinTheBudget) {
  // 2,000 calls at a 1 ms interval would be 2,000,000 checks a second; the
  // budget of 20,000 stretches the sweeps to 100 ms apart. Few calls keep
  // the interval.
  CancellationWatcher watcher(milliseconds(1), 20000);
  EXPECT_EQ(watcher.Pause(2000), milliseconds(100));
  EXPECT_EQ(watcher.Pause(20000), milliseconds(1000));
  EXPECT_EQ(watcher.Pause(20), milliseconds(1));
  EXPECT_EQ(watcher.Pause(0), milliseconds(1));
}

TEST(CancellationWatcherTest, AddWakesTheSleepingThread) {
  // Nothing watched: the thread sleeps; a new watch wakes it. The interval is
  // an hour, so only the wake-up can make the check run (the 10 s is a guard
  // against a hang, not a speed requirement).
  CancellationWatcher watcher(std::chrono::hours(1), 1000000);
  std::this_thread::sleep_for(milliseconds(20));
  std::atomic<bool> cancelled{false};
  auto watch = watcher.Add([] { return true; }, [&] { cancelled = true; });
  EXPECT_TRUE(WaitFor([&] { return cancelled.load(); }, milliseconds(10000)));
}

}  // namespace
}  // namespace encoderd::server
