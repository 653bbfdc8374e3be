#include "common/range.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace granary {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(RangeWithin, InsideAndEdges) {
  EXPECT_TRUE(common::RangeWithin(1000, 100, 1000, 100));
  EXPECT_TRUE(common::RangeWithin(1000, 100, 1050, 50));
  EXPECT_TRUE(common::RangeWithin(1000, 100, 1100, 0));  // empty range at the end
  EXPECT_FALSE(common::RangeWithin(1000, 100, 999, 1));
  EXPECT_FALSE(common::RangeWithin(1000, 100, 1050, 51));
  EXPECT_FALSE(common::RangeWithin(1000, 100, 1101, 0));
}

TEST(RangeWithin, SumsThatWouldWrapAreOutside) {
  // addr + len wraps to a small value: a check written as addr + len <= base + size passes it.
  EXPECT_FALSE(common::RangeWithin(1000, 100, 1050, kMax - 1000));
  EXPECT_FALSE(common::RangeWithin(kMax - 10, 10, kMax - 5, 20));
  EXPECT_TRUE(common::RangeWithin(kMax - 10, 10, kMax - 5, 5));
  EXPECT_FALSE(common::RangeWithin(0, kMax, 1, kMax));
  EXPECT_TRUE(common::RangeWithin(0, kMax, 0, kMax));
}

TEST(OffsetWithin, InsideEdgesAndWrap) {
  EXPECT_TRUE(common::OffsetWithin(100, 0, 100));
  EXPECT_TRUE(common::OffsetWithin(100, 100, 0));
  EXPECT_FALSE(common::OffsetWithin(100, 101, 0));
  EXPECT_FALSE(common::OffsetWithin(100, 1, 100));
  EXPECT_FALSE(common::OffsetWithin(100, 50, kMax - 10));
  EXPECT_FALSE(common::OffsetWithin(100, kMax, 2));
}

}  // namespace
}  // namespace granary
