#include "common/backoff.h"

#include <gtest/gtest.h>

#include <set>

namespace granary {
namespace {

TEST(Backoff, WaitsDoubleUpToTheBoundEachWithinItsJitterRange) {
  common::Backoff b(100, 1000);
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
    common::Backoff b(1000, 1000);
    seen.insert(b.NextMs());
  }
  EXPECT_GT(seen.size(), 10u);  // 50 draws from 501 values
}

TEST(Backoff, NonsenseBoundsAreClamped) {
  common::Backoff b(0, -5);  // at least 1 ms, and the bound at least the first wait
  for (int i = 0; i < 10; ++i) {
    int64_t w = b.NextMs();
    EXPECT_GE(w, 1);
    EXPECT_LE(w, 1);
  }
}

TEST(PeerHolds, RefusesAHeldPeerNamingItUntilItsWaitHasPassed) {
  common::PeerHolds holds(100, 1000);
  const auto t0 = common::PeerHolds::Clock::now();
  EXPECT_TRUE(holds.Check("10.0.0.1:7000", t0).ok());
  holds.Hold("10.0.0.1:7000", t0);
  EXPECT_TRUE(holds.Held("10.0.0.1:7000", t0));
  EXPECT_FALSE(holds.Held("10.0.0.2:7000", t0));  // only the peer that timed out
  absl::Status s = holds.Check("10.0.0.1:7000", t0 + std::chrono::milliseconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("node 10.0.0.1:7000 is unreachable (1 timed-out transfers"),
            std::string::npos)
      << s;
  // The first wait is in [50, 100] ms.
  EXPECT_TRUE(holds.Held("10.0.0.1:7000", t0 + std::chrono::milliseconds(49)));
  EXPECT_FALSE(holds.Held("10.0.0.1:7000", t0 + std::chrono::milliseconds(100)));
  EXPECT_TRUE(holds.Check("10.0.0.1:7000", t0 + std::chrono::milliseconds(100)).ok());
}

TEST(PeerHolds, AHoldWhileHeldCountsOnceAndLaterOnesDoubleTheWait) {
  common::PeerHolds holds(100, 1000);
  auto t = common::PeerHolds::Clock::now();
  holds.Hold("n", t);
  holds.Hold("n", t + std::chrono::milliseconds(1));  // same outage: no second failure
  EXPECT_NE(holds.Check("n", t + std::chrono::milliseconds(2)).message().find("(1 timed-out"),
            std::string::npos);
  t += std::chrono::milliseconds(100);  // past the first wait
  holds.Hold("n", t);                   // second in a row: [100, 200] ms
  EXPECT_NE(holds.Check("n", t).message().find("(2 timed-out"), std::string::npos);
  EXPECT_TRUE(holds.Held("n", t + std::chrono::milliseconds(99)));
  EXPECT_FALSE(holds.Held("n", t + std::chrono::milliseconds(200)));
}

TEST(PeerHolds, APeerQuietForTwiceTheLongestWaitStartsAfresh) {
  common::PeerHolds holds(100, 1000);
  auto t = common::PeerHolds::Clock::now();
  for (int i = 0; i < 6; ++i) {  // up to the 1000 ms bound
    holds.Hold("n", t);
    t += std::chrono::milliseconds(1000);
  }
  EXPECT_TRUE(holds.Check("n", t).ok());
  t += std::chrono::milliseconds(2001);  // 2 x max past the last hold's end
  holds.Hold("n", t);
  EXPECT_NE(holds.Check("n", t).message().find("(1 timed-out"), std::string::npos);
  EXPECT_FALSE(holds.Held("n", t + std::chrono::milliseconds(100)));  // the first wait again
}

}  // namespace
}  // namespace granary
