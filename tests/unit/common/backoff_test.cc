#include "common/backoff.h"

#include <gtest/gtest.h>

#include <set>

namespace granary {
namespace {

TEST(Backoff, WaitsDoubleUpToTheBoundEachWithinItsJitterRange) {
  Backoff b(100, 1000);
  const int64_t bounds[] = {100, 200, 400, 800, 1000, 1000, 1000};
  for (int64_t d : bounds) {
    int64_t w = b.NextMs();
    EXPECT_GE(w, d - d / 2) << d;
    EXPECT_LE(w, d) << d;
  }
  EXPECT_EQ(b.failures(), 7);
  b.Reset();
  EXPECT_EQ(b.failures(), 0);
  int64_t w = b.NextMs();
  EXPECT_GE(w, 50);
  EXPECT_LE(w, 100);
}

TEST(Backoff, WaitsAreJittered) {
  std::set<int64_t> seen;
  for (int i = 0; i < 50; ++i) {
    Backoff b(1000, 1000);
    seen.insert(b.NextMs());
  }
  EXPECT_GT(seen.size(), 10u);  // 50 draws from 501 values
}

TEST(Backoff, NonsenseBoundsAreClamped) {
  Backoff b(0, -5);  // at least 1 ms, and the bound at least the first wait
  for (int i = 0; i < 10; ++i) {
    int64_t w = b.NextMs();
    EXPECT_GE(w, 1);
    EXPECT_LE(w, 1);
  }
}

}  // namespace
}  // namespace granary
