// The placement rule (placement.h) and the SegmentRegistry calls that apply it: which segments a
// (tenant, tier) may use for a Put, for a Copy or Move, and which count as shared capacity.

#include "master/placement.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "master/segment_registry.h"
#include "proto/messages.h"

namespace granary::master {
namespace {

using proto::Tier;

constexpr uint64_t kMiB = 1024 * 1024;

TEST(PlacementRequestTest, PutUsesSharedSegmentsOfItsTierOnly) {
  const auto put = PlacementRequest::Put("acme", Tier::kHost);
  EXPECT_TRUE(put.Allows(Tier::kHost, ""));
  EXPECT_FALSE(put.Allows(Tier::kGpu, ""));
  EXPECT_FALSE(put.Allows(Tier::kHost, "acme"));  // its pool is Pool's, not Put's
  EXPECT_FALSE(put.Allows(Tier::kHost, "beta"));
  const auto gpu = PlacementRequest::Put("acme", Tier::kGpu);
  EXPECT_TRUE(gpu.Allows(Tier::kGpu, ""));
  EXPECT_FALSE(gpu.Allows(Tier::kHost, ""));
}

TEST(PlacementRequestTest, CopyUsesSharedSegmentsAndTheTenantsOwnPool) {
  const auto copy = PlacementRequest::Copy("acme", Tier::kHost);
  EXPECT_TRUE(copy.Allows(Tier::kHost, ""));
  EXPECT_TRUE(copy.Allows(Tier::kHost, "acme"));
  EXPECT_FALSE(copy.Allows(Tier::kHost, "beta"));
  EXPECT_FALSE(copy.Allows(Tier::kHost, "acme2"));  // a whole name, not a prefix
  EXPECT_FALSE(copy.Allows(Tier::kGpu, "acme"));
}

TEST(PlacementRequestTest, PoolUsesOnlyTheTenantsOwnPoolOfItsTier) {
  const auto pool = PlacementRequest::Pool("acme", Tier::kHost);
  EXPECT_TRUE(pool.Allows(Tier::kHost, "acme"));
  EXPECT_FALSE(pool.Allows(Tier::kHost, ""));
  EXPECT_FALSE(pool.Allows(Tier::kHost, "beta"));
  EXPECT_FALSE(pool.Allows(Tier::kHost, "acm"));
  EXPECT_FALSE(pool.Allows(Tier::kGpu, "acme"));
}

TEST(PlacementRequestTest, ACopyConfinedToItsPoolSkipsSharedSegments) {
  const auto copy = PlacementRequest::Copy("acme", Tier::kHost, /*shared=*/false);
  EXPECT_FALSE(copy.Allows(Tier::kHost, ""));
  EXPECT_TRUE(copy.Allows(Tier::kHost, "acme"));
  EXPECT_FALSE(copy.Allows(Tier::kHost, "beta"));
  EXPECT_EQ(copy.ToString(), "tenant 'acme' (host tier, copy, confined to its pool)");
}

TEST(PutRouteTest, PoolFirstSpillOnlyWithPoolSpillAndNeverSharedWhenThePoolIsDown) {
  // No pool: shared segments, whatever pool_spill says.
  for (bool spill : {false, true}) {
    PutRoute r = PutRoute::For(/*pool_mounted=*/false, /*pool_seen=*/false, spill);
    EXPECT_FALSE(r.pool);
    EXPECT_TRUE(r.shared);
    EXPECT_FALSE(r.pool_evict);
    EXPECT_FALSE(r.pool_down);
  }
  // A pool: it first, its own eviction last; shared in between only with pool_spill.
  PutRoute confined = PutRoute::For(true, true, false);
  EXPECT_TRUE(confined.pool);
  EXPECT_FALSE(confined.shared);
  EXPECT_TRUE(confined.pool_evict);
  PutRoute spills = PutRoute::For(true, true, true);
  EXPECT_TRUE(spills.pool);
  EXPECT_TRUE(spills.shared);
  EXPECT_TRUE(spills.pool_evict);
  // The pool's node is down: shared only with pool_spill, else nowhere.
  PutRoute down = PutRoute::For(false, true, false);
  EXPECT_TRUE(down.pool_down);
  EXPECT_FALSE(down.shared);
  EXPECT_FALSE(down.pool);
  PutRoute down_spill = PutRoute::For(false, true, true);
  EXPECT_FALSE(down_spill.pool_down);
  EXPECT_TRUE(down_spill.shared);
}

TEST(PlacementRequestTest, SharedCapacityCountsSharedSegmentsOfTheTier) {
  const auto shared = PlacementRequest::SharedCapacity(Tier::kHost);
  EXPECT_TRUE(shared.Allows(Tier::kHost, ""));
  EXPECT_FALSE(shared.Allows(Tier::kHost, "acme"));
  EXPECT_FALSE(shared.Allows(Tier::kGpu, ""));
}

TEST(PlacementRequestTest, ToStringNamesTenantTierAndPurpose) {
  EXPECT_EQ(PlacementRequest::Copy("acme", Tier::kGpu).ToString(),
            "tenant 'acme' (gpu tier, copy)");
  EXPECT_EQ(PlacementRequest::SharedCapacity(Tier::kHost).ToString(), "host tier, shared capacity");
}

class RegistryPlacementTest : public ::testing::Test {
 protected:
  uint64_t Mount(const std::string& node, const std::string& pool, uint64_t size = kMiB,
                 Tier tier = Tier::kHost) {
    proto::MountSegmentRequest m;
    m.name = node + "-seg";
    m.node_id = node;
    m.node_address = node + ":7000";
    m.base = 0x100000000ull * ++mounted_;
    m.size = size;
    m.tier = tier;
    m.pool = pool;
    m.rkey = "r";
    m.worker_address = "w";
    if (tier == Tier::kGpu) {  // a GPU segment is mounted with its IPC handle, not an rkey
      m.gpu_ipc = "ipc";
      m.gpu_uuid = std::string(16, 'u');
    }
    auto id = reg_.Mount(m, 1);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }

  SegmentRegistry reg_;
  int mounted_ = 0;
};

TEST_F(RegistryPlacementTest, AllocateSkipsPoolsAndOtherTiers) {
  Mount("pool-node", "acme");
  Mount("gpu-node", "", kMiB, Tier::kGpu);
  const uint64_t shared = Mount("shared-node", "");
  for (int i = 0; i < 8; ++i) {  // every rotor position
    auto p = reg_.Allocate(PlacementRequest::Put("acme", Tier::kHost), 4096, 1);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ((*p)[0].segment_id, shared);
  }
  auto two = reg_.Allocate(PlacementRequest::Put("acme", Tier::kHost), 4096, 2);
  EXPECT_TRUE(absl::IsResourceExhausted(two.status())) << two.status();
  EXPECT_NE(two.status().message().find("1 node(s)"), std::string::npos) << two.status();
}

TEST_F(RegistryPlacementTest, AllocateOnRefusesAnotherTenantsPool) {
  const uint64_t beta = Mount("beta-node", "beta");
  auto p = reg_.AllocateOn("beta-node", PlacementRequest::Copy("acme", Tier::kHost), 4096, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(p.status())) << p.status();
  EXPECT_NE(p.status().message().find("acme"), std::string::npos) << p.status();
  EXPECT_NE(p.status().message().find("tenant 'beta''s pool"), std::string::npos) << p.status();
  auto own =
      reg_.AllocateOn("beta-node:7000", PlacementRequest::Copy("beta", Tier::kHost), 4096, {});
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->segment_id, beta);
}

TEST_F(RegistryPlacementTest, PoolAllocationUsesOnlyThePool) {
  const uint64_t acme = Mount("acme-node", "acme");
  Mount("beta-node", "beta");
  Mount("shared-node", "");
  for (int i = 0; i < 8; ++i) {
    auto p = reg_.Allocate(PlacementRequest::Pool("acme", Tier::kHost), 4096, 1);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ((*p)[0].segment_id, acme);
  }
  auto none = reg_.Allocate(PlacementRequest::Pool("gamma", Tier::kHost), 4096, 1);
  EXPECT_TRUE(absl::IsResourceExhausted(none.status())) << none.status();
}

TEST_F(RegistryPlacementTest, PoolOfRemembersAPoolWhoseNodeWentAway) {
  EXPECT_FALSE(reg_.PoolOf("acme", Tier::kHost).seen);
  const uint64_t id = Mount("acme-node", "acme");
  EXPECT_TRUE(reg_.PoolOf("acme", Tier::kHost).mounted);
  EXPECT_TRUE(reg_.PoolOf("acme", Tier::kHost).seen);
  EXPECT_FALSE(reg_.PoolOf("acme", Tier::kGpu).seen);
  EXPECT_FALSE(reg_.PoolOf("beta", Tier::kHost).seen);
  ASSERT_TRUE(reg_.Unmount(id));
  EXPECT_FALSE(reg_.PoolOf("acme", Tier::kHost).mounted);
  EXPECT_TRUE(reg_.PoolOf("acme", Tier::kHost).seen);
}

TEST_F(RegistryPlacementTest, SegmentIdsForFiltersOnlyWhenSomeSegmentIsExcluded) {
  const uint64_t shared = Mount("shared-node", "");
  EXPECT_FALSE(reg_.SegmentIdsFor(PlacementRequest::SharedCapacity(Tier::kHost)).has_value());
  const uint64_t pool = Mount("acme-node", "acme");
  auto s = reg_.SegmentIdsFor(PlacementRequest::SharedCapacity(Tier::kHost));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, (absl::flat_hash_set<uint64_t>{shared}));
  auto p = reg_.SegmentIdsFor(PlacementRequest::Pool("acme", Tier::kHost));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (absl::flat_hash_set<uint64_t>{pool}));
}

TEST_F(RegistryPlacementTest, AllocateOnAConfinedTenantRefusesSharedNodes) {
  Mount("shared-node", "");
  const uint64_t own = Mount("acme-node", "acme");
  const auto confined = PlacementRequest::Copy("acme", Tier::kHost, /*shared=*/false);
  auto p = reg_.AllocateOn("shared-node", confined, 4096, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(p.status())) << p.status();
  EXPECT_NE(p.status().message().find("pool_spill is false"), std::string::npos) << p.status();
  auto q = reg_.AllocateOn("acme-node", confined, 4096, {});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->segment_id, own);
}

TEST_F(RegistryPlacementTest, CapacityOfCountsOnlyAllowedSegments) {
  Mount("shared-node", "", 2 * kMiB);
  Mount("pool-node", "acme", 3 * kMiB);
  Mount("gpu-node", "", 5 * kMiB, Tier::kGpu);
  EXPECT_EQ(reg_.totals().capacity, 10 * kMiB);
  const auto host = reg_.CapacityOf(PlacementRequest::SharedCapacity(Tier::kHost));
  EXPECT_EQ(host.capacity, 2 * kMiB);
  EXPECT_EQ(host.segments, 1u);
  EXPECT_EQ(reg_.CapacityOf(PlacementRequest::SharedCapacity(Tier::kGpu)).capacity, 5 * kMiB);
  EXPECT_EQ(reg_.CapacityOf(PlacementRequest::Copy("acme", Tier::kHost)).capacity, 5 * kMiB);
  // Used bytes follow the same rule: a copy into the pool is not shared usage.
  auto p = reg_.AllocateOn("pool-node", PlacementRequest::Copy("acme", Tier::kHost), 4096, {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(reg_.CapacityOf(PlacementRequest::SharedCapacity(Tier::kHost)).used, 0u);
  EXPECT_EQ(reg_.NodesThatHold(PlacementRequest::Put("x", Tier::kHost), 2 * kMiB), 1u);
  EXPECT_EQ(reg_.NodesThatHold(PlacementRequest::Put("x", Tier::kHost), 3 * kMiB), 0u);
}

}  // namespace
}  // namespace granary::master
