#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace encoderd::kernels {
namespace {

TEST(InParallelTest, OneThreadRunsTheBodyInTheCallerOutsideAnyRegion) {
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  InParallel(1, [&](int64_t t, int64_t nt) {
    ++calls;
    EXPECT_EQ(t, 0);
    EXPECT_EQ(nt, 1);
    EXPECT_EQ(std::this_thread::get_id(), caller);
    // An OpenMP region, even of one thread, is a level of nesting.
    EXPECT_EQ(omp_get_level(), 0);
  });
  EXPECT_EQ(calls, 1);
  InParallel(0, [&](int64_t t, int64_t nt) { calls += t == 0 && nt == 1; });
  EXPECT_EQ(calls, 2);
}

TEST(InParallelTest, EachThreadOfTheTeamRunsTheBodyOnce) {
  for (const int threads : {2, 3}) {
    std::mutex mu;
    std::vector<int64_t> seen, teams;
    InParallel(threads, [&](int64_t t, int64_t nt) {
      EXPECT_EQ(omp_get_level(), 1);
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(t);
      teams.push_back(nt);
    });
    ASSERT_FALSE(teams.empty());
    const int64_t nt = teams.front();
    EXPECT_GE(nt, 1);
    EXPECT_LE(nt, threads);
    for (const int64_t team : teams) EXPECT_EQ(team, nt);
    ASSERT_EQ(static_cast<int64_t>(seen.size()), nt);
    std::vector<int> count(static_cast<size_t>(nt), 0);
    for (const int64_t t : seen) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, nt);
      ++count[static_cast<size_t>(t)];
    }
    for (const int c : count) EXPECT_EQ(c, 1);
  }
}

TEST(InParallelTest, SharesCoverTheItemsInOrderAndEvenly) {
  for (const int64_t n : {0, 1, 5, 7, 12, 768, 4345}) {
    for (const int64_t nt : {1, 2, 3, 5, 16}) {
      int64_t next = 0, smallest = n, largest = 0;
      for (int64_t t = 0; t < nt; ++t) {
        const Share share = ShareOf(n, t, nt);
        EXPECT_EQ(share.begin, next) << n << " items, thread " << t << " of " << nt;
        EXPECT_GE(share.end, share.begin);
        smallest = std::min(smallest, share.end - share.begin);
        largest = std::max(largest, share.end - share.begin);
        next = share.end;
      }
      EXPECT_EQ(next, n) << n << " items, " << nt << " threads";
      EXPECT_LE(largest - smallest, 1) << n << " items, " << nt << " threads";
    }
  }
}

// Claims made one after another, as threads that take turns would make
// them.
TEST(ClaimedSharesTest, EachThreadClaimsItsShareInOrderThenTheBackHalfOfTheLargestLeft) {
  ClaimedShares claims(10, 2);  // shares [0, 5) and [5, 10)
  int64_t item = -1;
  for (int64_t expected = 0; expected < 5; ++expected) {
    ASSERT_TRUE(claims.Next(0, &item));
    EXPECT_EQ(item, expected);
  }
  ASSERT_TRUE(claims.Next(1, &item));  // thread 1 has begun its own
  EXPECT_EQ(item, 5);
  // Thread 0's share is done: it takes [8, 10) of thread 1's [6, 10).
  ASSERT_TRUE(claims.Next(0, &item));
  EXPECT_EQ(item, 8);
  ASSERT_TRUE(claims.Next(1, &item));
  EXPECT_EQ(item, 6);
  ASSERT_TRUE(claims.Next(0, &item));
  EXPECT_EQ(item, 9);
  // Thread 0 is done again and thread 1 has [7, 8) left: the larger half
  // of one is that one.
  ASSERT_TRUE(claims.Next(0, &item));
  EXPECT_EQ(item, 7);
  EXPECT_FALSE(claims.Next(1, &item));
  EXPECT_FALSE(claims.Next(0, &item));
}

TEST(ClaimedSharesTest, SharesOfThreadsThatNeverRunAreTaken) {
  // The runtime may run fewer threads than the shares were made for.
  for (const int64_t n : {0, 1, 7, 36, 48}) {
    for (const int64_t threads : {1, 2, 3, 8}) {
      ClaimedShares claims(n, threads);
      std::vector<int> seen(static_cast<size_t>(n), 0);
      int64_t item = -1;
      for (int64_t count = 0; claims.Next(0, &item); ++count) {
        ASSERT_LT(count, n) << n << " items, " << threads << " shares";
        ASSERT_GE(item, 0);
        ASSERT_LT(item, n);
        ++seen[static_cast<size_t>(item)];
      }
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << "item " << i;
    }
  }
}

TEST(ClaimedSharesTest, ThreadsClaimingAtOnceClaimEveryItemOnce) {
  for (const int64_t n : {1, 12, 48, 1000}) {
    for (const int threads : {2, 3, 4}) {
      ClaimedShares claims(n, threads);
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      std::vector<int64_t> claimed(static_cast<size_t>(threads), 0);
      std::vector<std::thread> team;
      for (int t = 0; t < threads; ++t) {
        team.emplace_back([&, t] {
          for (int64_t item; claims.Next(t, &item);) {
            seen[static_cast<size_t>(item)].fetch_add(1);
            ++claimed[static_cast<size_t>(t)];
            // Thread 0 dawdles, so that the others take from its share.
            if (t == 0) std::this_thread::yield();
          }
        });
      }
      for (std::thread& thread : team) thread.join();
      int64_t total = 0;
      for (const int64_t c : claimed) total += c;
      EXPECT_EQ(total, n) << n << " items, " << threads << " threads";
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(seen[static_cast<size_t>(i)].load(), 1) << "item " << i << " of " << n;
      }
    }
  }
}

TEST(ClaimedSharesTest, CountsUpToTheLargestItsRangesHold) {
  ClaimedShares claims(0xffffffff, 2);  // [0, 0x7fffffff) and [0x7fffffff, 0xffffffff)
  int64_t item = -1;
  ASSERT_TRUE(claims.Next(1, &item));
  EXPECT_EQ(item, 0x7fffffff);
  ASSERT_TRUE(claims.Next(1, &item));
  EXPECT_EQ(item, 0x80000000);
  ASSERT_TRUE(claims.Next(0, &item));
  EXPECT_EQ(item, 0);
}

TEST(ClaimedSharesTest, RefusesMoreItemsThanItCounts) {
  EXPECT_THROW(ClaimedShares(int64_t{1} << 32, 2), std::invalid_argument);
  EXPECT_THROW(ClaimedShares(-1, 2), std::invalid_argument);
}

TEST(WithTeamTest, TheWorksRegionsRunOnTheThreadsItHolds) {
  const std::thread::id caller = std::this_thread::get_id();
  std::set<std::thread::id> others;
  int levels_seen = 0;
  WithTeam(2, [&] {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    // Inside WithTeam's region: the regions below, at level 1 too, are not
    // OpenMP regions of their own (those would be nested, at level 2).
    EXPECT_TRUE(omp_in_parallel());
    std::vector<int64_t> out(1000);
    for (int region = 0; region < 2000; ++region) {
      std::mutex mu;
      InParallel(2, [&](int64_t t, int64_t nt) {
        EXPECT_EQ(nt, 2);
        const Share share = ShareOf(static_cast<int64_t>(out.size()), t, nt);
        for (int64_t i = share.begin; i < share.end; ++i) out[i] = region;
        std::lock_guard<std::mutex> lock(mu);
        // Inside WithTeam's region, not one of its own.
        if (omp_get_level() == 1) ++levels_seen;
        if (t == 0) {
          EXPECT_EQ(std::this_thread::get_id(), caller);
        } else {
          others.insert(std::this_thread::get_id());
        }
      });
      // Every thread's writes are done when InParallel returns.
      for (const int64_t v : out) ASSERT_EQ(v, region);
    }
  });
  // One held thread took every region's other share.
  EXPECT_EQ(others.size(), 1u);
  EXPECT_EQ(others.count(caller), 0u);
  EXPECT_EQ(levels_seen, 2 * 2000);
}

TEST(WithTeamTest, EveryShareOfEveryRegionRunsOnce) {
  // Short regions of three threads, more than this host's two vCPUs give
  // where it has two: each share of each region runs once, none is lost
  // or run twice while a thread waits for the CPU. (The runtime may give
  // fewer threads: then every region has as many.)
  constexpr int kRegions = 20000;
  std::vector<std::atomic<int>> runs(3 * kRegions);
  std::atomic<int64_t> team_size{0};
  WithTeam(3, [&] {
    for (int region = 0; region < kRegions; ++region) {
      InParallel(3, [&](int64_t t, int64_t nt) {
        int64_t expected = 0;
        team_size.compare_exchange_strong(expected, nt);
        ASSERT_EQ(nt, team_size.load());
        runs[static_cast<size_t>(3 * region + t)].fetch_add(1, std::memory_order_relaxed);
      });
    }
  });
  const int64_t nt = team_size.load();
  ASSERT_GE(nt, 1);
  for (int region = 0; region < kRegions; ++region) {
    for (int64_t t = 0; t < 3; ++t) {
      ASSERT_EQ(runs[static_cast<size_t>(3 * region + t)].load(), t < nt ? 1 : 0)
          << "region " << region << ", share " << t;
    }
  }
}

TEST(WithTeamTest, ThrowsWhatTheWorkThrowsOnceTheThreadsAreLetGo) {
  EXPECT_THROW(WithTeam(2,
                        [] {
                          InParallel(2, [](int64_t, int64_t) {});
                          throw std::runtime_error("work failed");
                        }),
               std::runtime_error);
  // The threads were let go: a new team has them.
  std::atomic<int> calls{0};
  WithTeam(2, [&] { InParallel(2, [&](int64_t, int64_t) { calls.fetch_add(1); }); });
  EXPECT_EQ(calls.load(), 2);
}

TEST(WithTeamTest, NestedWorkAndRegionsRunWhereTheyCan) {
  std::atomic<int> outer_calls{0}, nested_calls{0}, more_threads_calls{0};
  bool nested_work_ran = false;
  WithTeam(2, [&] {
    // Another WithTeam inside: its work runs here, on the same team.
    WithTeam(2, [&] {
      nested_work_ran = true;
      InParallel(2, [&](int64_t, int64_t nt) { outer_calls.fetch_add(nt == 2); });
    });
    // A region inside a region of the team: the caller's share runs it
    // alone (OpenMP's nested region of one thread).
    InParallel(2, [&](int64_t t, int64_t) {
      if (t == 0) InParallel(2, [&](int64_t, int64_t nt) { nested_calls.fetch_add(nt == 1); });
    });
    // More threads than the team has: the team's, as a region of the
    // threads the runtime gave.
    InParallel(3, [&](int64_t, int64_t nt) { more_threads_calls.fetch_add(nt == 2); });
  });
  EXPECT_TRUE(nested_work_ran);
  EXPECT_EQ(outer_calls.load(), 2);
  // Nested OpenMP regions have one thread unless the environment allows
  // more active levels (OMP_MAX_ACTIVE_LEVELS).
  EXPECT_EQ(more_threads_calls.load(), 2);
  if (omp_get_max_active_levels() <= 1) {
    EXPECT_EQ(nested_calls.load(), 1);
  }
}

TEST(WithTeamTest, OneThreadIsAPlainCall) {
  const std::thread::id caller = std::this_thread::get_id();
  bool ran = false;
  std::atomic<int> regions_of_openmp{0};
  WithTeam(1, [&] {
    ran = true;
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(omp_get_level(), 0);
    // No team: OpenMP's region.
    InParallel(2, [&](int64_t, int64_t) { regions_of_openmp.fetch_add(omp_get_level() == 1); });
  });
  EXPECT_TRUE(ran);
  EXPECT_GE(regions_of_openmp.load(), 1);
}

}  // namespace
}  // namespace encoderd::kernels
