#include "master/offset_allocator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <vector>

namespace granary::master {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

uint64_t RoundUp(uint64_t size, uint64_t alignment) {
  return (size + alignment - 1) / alignment * alignment;
}

// Resident set size of this process in bytes, from /proc/self/statm.
uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t total_pages = 0, resident_pages = 0;
  statm >> total_pages >> resident_pages;
  return resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Reference model: live allocations by offset -> size. Since the allocator coalesces
// immediately, its free blocks must be exactly the maximal gaps between live allocations.
void ExpectMatchesModel(const OffsetAllocator& alloc, const std::map<uint64_t, uint64_t>& live) {
  uint64_t used = 0, cursor = 0, largest_gap = 0;
  size_t gaps = 0;
  for (const auto& [offset, size] : live) {
    ASSERT_GE(offset, cursor) << "overlap at " << offset;
    if (offset > cursor) {
      ++gaps;
      largest_gap = std::max(largest_gap, offset - cursor);
    }
    cursor = offset + size;
    used += size;
  }
  ASSERT_LE(cursor, alloc.capacity());
  if (cursor < alloc.capacity()) {
    ++gaps;
    largest_gap = std::max(largest_gap, alloc.capacity() - cursor);
  }
  EXPECT_EQ(alloc.used_bytes(), used);
  EXPECT_EQ(alloc.free_bytes(), alloc.capacity() - used);
  EXPECT_EQ(alloc.allocation_count(), live.size());
  EXPECT_EQ(alloc.free_block_count(), gaps);
  EXPECT_EQ(alloc.largest_free_block(), largest_gap);
}

TEST(OffsetAllocator, BasicAllocFree) {
  OffsetAllocator alloc(1 * kMiB);
  EXPECT_EQ(alloc.capacity(), 1 * kMiB);
  EXPECT_EQ(alloc.free_bytes(), 1 * kMiB);
  EXPECT_EQ(alloc.free_block_count(), 1u);
  EXPECT_FALSE(alloc.Allocate(0).has_value());

  auto a = alloc.Allocate(100);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(a->size, 128u);
  auto b = alloc.Allocate(64);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->offset, 128u);
  EXPECT_EQ(b->size, 64u);
  EXPECT_TRUE(alloc.IsLive(*a));
  EXPECT_TRUE(alloc.IsLive(*b));
  EXPECT_FALSE(alloc.IsLive({64, 64, b->handle}));  // a live handle at another offset
  EXPECT_EQ(alloc.used_bytes(), 192u);
  EXPECT_EQ(alloc.allocation_count(), 2u);
  EXPECT_EQ(alloc.free_block_count(), 1u);
  EXPECT_EQ(alloc.largest_free_block(), 1 * kMiB - 192);

  alloc.Free(*a);
  EXPECT_FALSE(alloc.IsLive(*a));
  EXPECT_EQ(alloc.free_block_count(), 2u);
  EXPECT_EQ(alloc.used_bytes(), 64u);
  // The freed hole is reused for a request that fits it.
  auto c = alloc.Allocate(128);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->offset, 0u);
  alloc.Free(*c);
  alloc.Free(*b);
  EXPECT_EQ(alloc.used_bytes(), 0u);
  EXPECT_EQ(alloc.allocation_count(), 0u);
  EXPECT_EQ(alloc.free_block_count(), 1u);
  EXPECT_EQ(alloc.largest_free_block(), 1 * kMiB);
}

TEST(OffsetAllocator, AlignmentRespected) {
  for (uint64_t alignment = 8; alignment <= 64 * kKiB; alignment *= 2) {
    OffsetAllocator alloc(64 * kMiB, alignment);
    EXPECT_EQ(alloc.alignment(), alignment);
    for (uint64_t size : {1ull, 7ull, 9ull, 63ull, 65ull, 1000ull, 4097ull, 12345ull, 99999ull}) {
      auto a = alloc.Allocate(size);
      ASSERT_TRUE(a.has_value()) << "alignment " << alignment << " size " << size;
      EXPECT_EQ(a->offset % alignment, 0u) << alignment;
      EXPECT_EQ(a->size % alignment, 0u) << alignment;
      EXPECT_EQ(a->size, RoundUp(size, alignment));
    }
  }
}

TEST(OffsetAllocator, ExhaustionThenFullReclaim) {
  constexpr uint64_t kBlocks = 1000;
  OffsetAllocator alloc(kBlocks * 64);
  std::vector<OffsetAllocator::Allocation> allocations;
  for (uint64_t i = 0; i < kBlocks; ++i) {
    auto a = alloc.Allocate(1 + i % 64);  // Every size rounds up to 64.
    ASSERT_TRUE(a.has_value()) << i;
    allocations.push_back(*a);
  }
  EXPECT_EQ(alloc.free_bytes(), 0u);
  EXPECT_EQ(alloc.free_block_count(), 0u);
  EXPECT_EQ(alloc.largest_free_block(), 0u);
  EXPECT_EQ(alloc.fragmentation(), 0.0);
  EXPECT_FALSE(alloc.Allocate(1).has_value());

  std::shuffle(allocations.begin(), allocations.end(), std::mt19937_64(7));
  for (const auto& a : allocations) alloc.Free(a);
  EXPECT_EQ(alloc.used_bytes(), 0u);
  EXPECT_EQ(alloc.free_bytes(), kBlocks * 64);
  EXPECT_EQ(alloc.free_block_count(), 1u);
  EXPECT_EQ(alloc.largest_free_block(), kBlocks * 64);
  EXPECT_EQ(alloc.fragmentation(), 0.0);

  EXPECT_FALSE(alloc.Allocate(kBlocks * 64 + 1).has_value());
  EXPECT_FALSE(alloc.Allocate(std::numeric_limits<uint64_t>::max()).has_value());
  auto all = alloc.Allocate(kBlocks * 64);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->offset, 0u);
  EXPECT_EQ(alloc.free_block_count(), 0u);
}

TEST(OffsetAllocator, CoalescesNeighboursInAnyOrder) {
  const std::vector<std::vector<int>> orders = {{1, 0, 2}, {1, 2, 0}, {0, 2, 1},
                                                {2, 0, 1}, {0, 1, 2}, {2, 1, 0}};
  for (const auto& order : orders) {
    OffsetAllocator alloc(3 * 4096);
    OffsetAllocator::Allocation blocks[3];
    for (int i = 0; i < 3; ++i) blocks[i] = alloc.Allocate(4096).value();
    ASSERT_EQ(alloc.free_block_count(), 0u);
    std::map<uint64_t, uint64_t> live = {{0, 4096}, {4096, 4096}, {8192, 4096}};
    for (int i : order) {
      alloc.Free(blocks[i]);
      live.erase(blocks[i].offset);
      ExpectMatchesModel(alloc, live);
    }
    EXPECT_EQ(alloc.free_block_count(), 1u);
    EXPECT_EQ(alloc.largest_free_block(), 3 * 4096u);
  }
  // Two free blocks around a live one: half the free space is unusable as one block.
  OffsetAllocator alloc(3 * 4096);
  OffsetAllocator::Allocation blocks[3];
  for (int i = 0; i < 3; ++i) blocks[i] = alloc.Allocate(4096).value();
  alloc.Free(blocks[0]);
  alloc.Free(blocks[2]);
  EXPECT_EQ(alloc.free_block_count(), 2u);
  EXPECT_DOUBLE_EQ(alloc.fragmentation(), 0.5);
  alloc.Free(blocks[1]);
  EXPECT_EQ(alloc.free_block_count(), 1u);
  EXPECT_DOUBLE_EQ(alloc.fragmentation(), 0.0);
}

TEST(OffsetAllocator, FallsBackToFirstFitWithinOwnClass) {
  // 4096 and 4160 share a size class (4096 is its minimum), so a 4160-byte request finds no
  // bin whose every block fits and must scan its own class, skipping the 4096 block.
  OffsetAllocator alloc(4096 + 64 + 4160);
  const auto a = alloc.Allocate(4096).value();
  const auto b = alloc.Allocate(64).value();
  const auto c = alloc.Allocate(4160).value();
  ASSERT_EQ(alloc.free_bytes(), 0u);
  alloc.Free(c);
  alloc.Free(a);
  ASSERT_EQ(alloc.free_block_count(), 2u);
  EXPECT_EQ(alloc.largest_free_block(), 4160u);
  auto d = alloc.Allocate(4100);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->offset, c.offset);
  EXPECT_EQ(d->size, 4160u);
  EXPECT_FALSE(alloc.Allocate(4097).has_value());  // Only the 4096 block is left.
  EXPECT_TRUE(alloc.IsLive(b));
}

TEST(OffsetAllocator, UnalignedCapacityKeepsTailFree) {
  OffsetAllocator alloc(1000);  // 15 * 64 = 960, 40-byte tail.
  auto a = alloc.Allocate(960);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(alloc.free_bytes(), 40u);
  EXPECT_FALSE(alloc.Allocate(8).has_value());
  alloc.Free(*a);
  EXPECT_EQ(alloc.free_bytes(), 1000u);
  EXPECT_EQ(alloc.free_block_count(), 1u);
}

TEST(OffsetAllocator, HugeCapacityUsesMemoryProportionalToBlocks) {
  for (uint64_t capacity : {uint64_t{1} << 40, uint64_t{1} << 48}) {
    const uint64_t rss_before = ResidentBytes();
    OffsetAllocator alloc(capacity);
    std::vector<OffsetAllocator::Allocation> allocations;
    std::mt19937_64 rng(capacity);
    std::map<uint64_t, uint64_t> live;
    for (int i = 0; i < 2000; ++i) {
      const uint64_t size = (i % 100 == 0) ? capacity / 64 : 1 + rng() % (64 * kMiB);
      auto a = alloc.Allocate(size);
      ASSERT_TRUE(a.has_value()) << i;
      allocations.push_back(*a);
      live[a->offset] = a->size;
    }
    ExpectMatchesModel(alloc, live);
    for (size_t i = 0; i < allocations.size(); i += 2) {
      alloc.Free(allocations[i]);
      live.erase(allocations[i].offset);
    }
    ExpectMatchesModel(alloc, live);
    const uint64_t rss_after = ResidentBytes();
    EXPECT_LT(rss_after > rss_before ? rss_after - rss_before : 0, 16 * kMiB);
    for (size_t i = 1; i < allocations.size(); i += 2) alloc.Free(allocations[i]);
    EXPECT_EQ(alloc.free_block_count(), 1u);
    EXPECT_EQ(alloc.largest_free_block(), capacity);
    auto all = alloc.Allocate(capacity);
    ASSERT_TRUE(all.has_value());
    EXPECT_EQ(all->offset, 0u);
  }
}

struct RandomParams {
  uint64_t seed;
  uint64_t capacity;
  uint64_t alignment;
};

void PrintTo(const RandomParams& p, std::ostream* os) {
  *os << "{seed " << p.seed << ", capacity " << p.capacity << ", alignment " << p.alignment << "}";
}

class OffsetAllocatorRandomTest : public ::testing::TestWithParam<RandomParams> {};

TEST_P(OffsetAllocatorRandomTest, MatchesReferenceModel) {
  const RandomParams p = GetParam();
  constexpr int kOps = 200000;
  OffsetAllocator alloc(p.capacity, p.alignment);
  std::mt19937_64 rng(p.seed);
  std::map<uint64_t, uint64_t> live;  // offset -> reserved size
  std::vector<OffsetAllocator::Allocation> live_allocations;
  uint64_t live_bytes = 0;
  int failures = 0;

  auto random_size = [&]() -> uint64_t {
    const uint64_t kind = rng() % 100;
    if (kind < 55) return 1 + rng() % 512;             // tiny
    if (kind < 92) return 513 + rng() % (256 * kKiB);  // medium
    return 1 + rng() % (p.capacity / 8);               // large
  };

  for (int op = 0; op < kOps; ++op) {
    // Cycle through filling, steady and draining phases so the allocator hits exhaustion,
    // heavy fragmentation and near-empty states repeatedly.
    static constexpr uint64_t kAllocPercent[] = {70, 50, 45, 55, 35};
    const uint64_t alloc_percent = kAllocPercent[(op / 20000) % 5];
    if (live_allocations.empty() || rng() % 100 < alloc_percent) {
      const uint64_t size = random_size();
      const uint64_t rounded = RoundUp(size, p.alignment);
      auto a = alloc.Allocate(size);
      if (!a.has_value()) {
        // Allocate fails only when no free block could hold the request.
        ASSERT_LT(alloc.largest_free_block(), rounded) << "op " << op;
        ++failures;
        continue;
      }
      ASSERT_EQ(a->size, rounded);
      ASSERT_EQ(a->offset % p.alignment, 0u);
      ASSERT_LE(a->offset + a->size, p.capacity);
      auto next = live.lower_bound(a->offset);
      if (next != live.end()) {
        ASSERT_GE(next->first, a->offset + a->size) << "op " << op;
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, a->offset) << "op " << op;
      }
      live.emplace(a->offset, a->size);
      live_allocations.push_back(*a);
      live_bytes += a->size;
      ASSERT_TRUE(alloc.IsLive(*a));
    } else {
      const size_t i = rng() % live_allocations.size();
      const OffsetAllocator::Allocation a = live_allocations[i];
      live_allocations[i] = live_allocations.back();
      live_allocations.pop_back();
      live_bytes -= live.at(a.offset);
      live.erase(a.offset);
      alloc.Free(a);
      ASSERT_FALSE(alloc.IsLive(a));
    }
    ASSERT_EQ(alloc.used_bytes(), live_bytes);
    ASSERT_EQ(alloc.allocation_count(), live.size());
    if (op % 2000 == 0) {
      ExpectMatchesModel(alloc, live);
      if (HasFatalFailure() || HasNonfatalFailure()) return;
    }
  }
  EXPECT_GT(failures, 0) << "the workload should exhaust the allocator at least once";

  std::shuffle(live_allocations.begin(), live_allocations.end(), rng);
  for (const auto& a : live_allocations) alloc.Free(a);
  EXPECT_EQ(alloc.used_bytes(), 0u);
  EXPECT_EQ(alloc.allocation_count(), 0u);
  EXPECT_EQ(alloc.free_bytes(), p.capacity);
  EXPECT_EQ(alloc.free_block_count(), 1u);
  EXPECT_EQ(alloc.largest_free_block(), p.capacity);
  EXPECT_EQ(alloc.fragmentation(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Seeds, OffsetAllocatorRandomTest,
                         ::testing::Values(RandomParams{1, 64 * kMiB, 64},
                                           RandomParams{2, 64 * kMiB + 100, 64},
                                           RandomParams{3, 1024 * kMiB, 4096},
                                           RandomParams{4, 16 * kMiB, 8},
                                           RandomParams{5, 256 * kMiB, 512}));

TEST(OffsetAllocatorDeathTest, FreeOfUnknownAllocationCrashes) {
  OffsetAllocator alloc(1 * kMiB);
  const auto a = alloc.Allocate(128).value();
  EXPECT_DEATH(alloc.Free({12345, 128, a.handle}), "offset 12345");     // Wrong offset.
  EXPECT_DEATH(alloc.Free({a.offset + 64, 64, a.handle}), "not live");  // Inside a live one.
  EXPECT_DEATH(alloc.Free({a.offset, 128, 999}), "handle 999");         // Handle out of range.
  // The free block's node: it is free, so not live.
  const auto b = alloc.Allocate(64).value();
  alloc.Free(b);
  EXPECT_DEATH(alloc.Free(b), "double free");  // b merged into the free tail: not live.
  alloc.Free(a);
  EXPECT_DEATH(alloc.Free(a), "double free");  // Double free.
}

TEST(OffsetAllocator, HandlesOfFreedBlocksAreNotLiveAfterReuse) {
  OffsetAllocator alloc(1 * kMiB);
  const auto a = alloc.Allocate(64).value();
  const auto b = alloc.Allocate(64).value();
  alloc.Free(a);
  alloc.Free(b);  // Merges everything back into one block: b's node is released.
  EXPECT_FALSE(alloc.IsLive(a));
  EXPECT_FALSE(alloc.IsLive(b));
  // A new allocation at another offset may reuse a released node: the old handle with its old
  // offset still does not name it.
  const auto c = alloc.Allocate(4096).value();
  const auto d = alloc.Allocate(64).value();
  EXPECT_TRUE(alloc.IsLive(c));
  EXPECT_TRUE(alloc.IsLive(d));
  EXPECT_EQ(alloc.IsLive({b.offset, b.size, d.handle}), d.offset == b.offset);
  EXPECT_EQ(alloc.allocation_count(), 2u);
}

TEST(OffsetAllocatorDeathTest, BadAlignmentCrashes) {
  EXPECT_DEATH(OffsetAllocator(1024, 4), "alignment");
  EXPECT_DEATH(OffsetAllocator(1024, 96), "alignment");
}

}  // namespace
}  // namespace granary::master

namespace granary::master {
namespace {

TEST(OffsetAllocatorAt, ReservesExactRangesInAnyOrderAndRefusesOverlaps) {
  OffsetAllocator a(64 * kKiB, 64);
  // Ascending (the hint path), then one below the last (the scan path).
  auto r1 = a.AllocateAt(4096, 100);
  ASSERT_TRUE(r1.has_value());
  EXPECT_EQ(r1->offset, 4096u);
  EXPECT_EQ(r1->size, 128u);
  auto r2 = a.AllocateAt(8192, 4096);
  ASSERT_TRUE(r2.has_value());
  auto r0 = a.AllocateAt(0, 64);
  ASSERT_TRUE(r0.has_value());
  EXPECT_EQ(a.used_bytes(), 128u + 4096u + 64u);
  EXPECT_EQ(a.allocation_count(), 3u);
  // Overlaps with each reserved range, unaligned offsets and ranges past the end are refused.
  EXPECT_FALSE(a.AllocateAt(4096, 64).has_value());
  EXPECT_FALSE(a.AllocateAt(4032, 128).has_value());
  EXPECT_FALSE(a.AllocateAt(8192 + 4032, 128).has_value());
  EXPECT_FALSE(a.AllocateAt(100, 64).has_value());
  EXPECT_FALSE(a.AllocateAt(64 * kKiB - 64, 128).has_value());
  EXPECT_FALSE(a.AllocateAt(64 * kKiB, 64).has_value());
  // Allocate never hands out a reserved byte.
  std::vector<OffsetAllocator::Allocation> more;
  while (auto x = a.Allocate(64)) more.push_back(*x);
  for (const auto& x : more) {
    for (const auto& r : {*r0, *r1, *r2}) {
      EXPECT_TRUE(x.offset + x.size <= r.offset || r.offset + r.size <= x.offset)
          << x.offset << " overlaps " << r.offset;
    }
  }
  EXPECT_EQ(a.free_bytes(), 0u);
  // Freeing everything coalesces back to one block of the whole capacity.
  for (const auto& x : more) a.Free(x);
  a.Free(*r1);
  a.Free(*r0);
  a.Free(*r2);
  EXPECT_EQ(a.used_bytes(), 0u);
  EXPECT_EQ(a.free_block_count(), 1u);
  EXPECT_EQ(a.largest_free_block(), 64 * kKiB);
}

TEST(OffsetAllocatorAt, TakeAllFreeLeavesNothingAllocatableUntilGivenBack) {
  OffsetAllocator a(1 * kMiB, 64);
  auto kept = a.AllocateAt(512 * kKiB, 64 * kKiB);
  ASSERT_TRUE(kept.has_value());
  auto taken = a.TakeAllFree();
  EXPECT_EQ(taken.size(), 2u);  // below and above the kept range
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_FALSE(a.Allocate(64).has_value());
  // Freeing the kept object makes exactly its range allocatable again.
  a.Free(*kept);
  auto again = a.Allocate(64 * kKiB);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->offset, 512 * kKiB);
  for (const auto& t : taken) a.Free(t);
  a.Free(*again);
  EXPECT_EQ(a.free_block_count(), 1u);
  EXPECT_EQ(a.largest_free_block(), 1 * kMiB);
}

}  // namespace
}  // namespace granary::master
