#include "common/work_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace granary {
namespace {

TEST(WorkPool, RunsEveryPartOnceAndReturnsAfterTheLast) {
  for (int threads : {0, 1, 3}) {
    common::WorkPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}}) {
      std::vector<int> runs(n, 0);  // plain ints: ParallelFor's return publishes them
      pool.ParallelFor(n, [&](size_t i) { ++runs[i]; });
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(runs[i], 1) << "threads " << threads << " n " << n << " part " << i;
      }
    }
  }
}

TEST(WorkPool, PoolThreadsTakePartsWhileTheCallerIsBusy) {
  common::WorkPool pool(2);
  // Part 0 blocks until another part has run: only a pool thread can run it meanwhile (the
  // caller is inside part 0 or the pool thread took part 0 and the caller runs the rest).
  std::atomic<int> others{0};
  std::vector<std::thread::id> who(3);
  pool.ParallelFor(3, [&](size_t i) {
    who[i] = std::this_thread::get_id();
    if (i == 0) {
      while (others.load() < 2) std::this_thread::yield();
    } else {
      others.fetch_add(1);
    }
  });
  EXPECT_EQ(others.load(), 2);
  // At least two threads ran parts.
  EXPECT_TRUE(who[0] != who[1] || who[0] != who[2]);
}

TEST(WorkPool, ManyCallersShareOnePool) {
  common::WorkPool pool(2);
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&pool, &wrong, t] {
      for (int round = 0; round < 200; ++round) {
        std::vector<int> v(64, 0);
        pool.ParallelFor(v.size(),
                         [&](size_t i) { v[i] = t * 1000 + round + static_cast<int>(i); });
        for (size_t i = 0; i < v.size(); ++i) {
          if (v[i] != t * 1000 + round + static_cast<int>(i)) wrong.fetch_add(1);
        }
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace granary
