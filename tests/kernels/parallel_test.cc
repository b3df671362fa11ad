#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <mutex>
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

}  // namespace
}  // namespace encoderd::kernels
