// Tenant pools through the master (placement.h): a pooled tenant's puts go to its pool, spill to
// shared segments only with pool_spill, and a full pool evicts only that tenant's objects there;
// no other tenant's object lands on a pool by Put, Copy or Move.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "master/master_service.h"
#include "master/tenant/policy.h"
#include "proto/alloc_header.h"
#include "tests/unit/master/master_fixture.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using test_calls::Code;

constexpr uint64_t kObj = 64 * 1024 - proto::kAllocHeaderSize;  // allocates exactly 64 KiB
constexpr uint64_t kSlot = 64 * 1024;

class PoolPlacementTest : public ::testing::Test {
 protected:
  // A master with a shared node of `shared_slots` objects and tenant "pooled"'s pool node of
  // `pool_slots`; "pooled" may spill when `spill`.
  void Start(uint64_t shared_slots, uint64_t pool_slots, bool spill) {
    opts_.enable_multi_tenants = true;
    svc_ = std::make_unique<MasterService>(opts_, &clock_, &metrics_);
    shared_seg_ = Mount("shared", "", shared_slots * kSlot);
    if (pool_slots > 0) pool_seg_ = Mount("pool", "pooled", pool_slots * kSlot);
    SetSpill(spill);
  }
  void SetSpill(bool spill) {
    tenant::Policy p;
    p.tenants.push_back({"pooled", 1ull << 30, std::nullopt, "", spill});
    p.tenants.push_back({"other", 1ull << 30, std::nullopt});
    svc_->ledger()->ApplyPolicy(p, svc_->capacity());
  }
  uint64_t Mount(const std::string& node, const std::string& pool, uint64_t size) {
    SessionId n = next_++;
    EXPECT_EQ(Code(test_calls::Hello(*svc_, n, proto::Role::kNode, node)), absl::StatusCode::kOk);
    proto::MountSegmentRequest m;
    m.name = node + "-seg";
    m.node_id = node;
    m.node_address = node + ":1";
    m.base = (1ull << 32) * n;
    m.size = size;
    m.pool = pool;
    m.rkey = "r";
    m.worker_address = "w";
    auto rep = svc_->MountSegment(n, m);
    EXPECT_EQ(Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    node_sessions_.push_back(n);
    return rep.segment_id;
  }
  SessionId Client(const std::string& tenant) {
    EXPECT_EQ(Code(test_calls::Hello(*svc_, next_, proto::Role::kClient, tenant)),
              absl::StatusCode::kOk);
    return next_++;
  }
  absl::Status Put(SessionId s, const std::string& key, uint32_t flags = 0) {
    clock_.AdvanceMs(1);  // distinct access times
    return test_calls::PutCommitted(*svc_, s, key, kObj, flags);
  }
  // The segments holding the key's replicas (empty when it is gone).
  std::vector<uint64_t> Where(SessionId s, const std::string& key) {
    proto::ListRequest lr;
    lr.prefix = key;
    lr.limit = 10;
    std::vector<uint64_t> out;
    for (const auto& o : svc_->List(s, lr).objects) {
      if (o.key != key) continue;
      for (const auto& r : o.replicas) out.push_back(r.segment_id);
    }
    return out;
  }
  uint64_t UsedOf(uint64_t segment_id) {
    for (const auto& seg : svc_->ListSegments()) {
      if (seg.segment_id == segment_id) return seg.used;
    }
    return UINT64_MAX;
  }
  absl::Status CopyTo(SessionId s, const std::string& key, const std::string& node, bool move) {
    proto::CopyStartRequest req;
    req.entries.push_back({key, node});
    auto rep = svc_->CopyStart(s, req, move);
    if (Code(rep.status) != absl::StatusCode::kOk) return rep.status.ToStatus();
    return rep.results[0].status.ToStatus();
  }

  MasterOptions opts_;
  common::FakeClock clock_;
  common::MetricsRegistry metrics_;
  std::unique_ptr<MasterService> svc_;
  SessionId next_ = 10;
  std::vector<SessionId> node_sessions_;
  uint64_t shared_seg_ = 0, pool_seg_ = 0;
};

TEST_F(PoolPlacementTest, APooledTenantsPutsLandInItsPoolAndOthersOnSharedSegments) {
  Start(8, 8, /*spill=*/false);
  SessionId p = Client("pooled"), o = Client("other");
  for (int i = 0; i < 4; ++i) {  // every rotor position
    ASSERT_TRUE(Put(p, absl::StrCat("p", i)).ok());
    ASSERT_TRUE(Put(o, absl::StrCat("o", i)).ok());
    EXPECT_EQ(Where(p, absl::StrCat("p", i)), std::vector<uint64_t>{pool_seg_}) << i;
    EXPECT_EQ(Where(o, absl::StrCat("o", i)), std::vector<uint64_t>{shared_seg_}) << i;
  }
  auto pools = svc_->ListPools();
  ASSERT_EQ(pools.size(), 1u);
  EXPECT_EQ(pools[0].tenant, "pooled");
  EXPECT_EQ(pools[0].totals.capacity, 8 * kSlot);
  EXPECT_EQ(pools[0].totals.used, 4 * kSlot);
  // Quotas scale against shared capacity only: the pool is not space other tenants can use.
  EXPECT_EQ(svc_->capacity(), 8 * kSlot);
  // A tenant confined to its pool takes no shared space: its quota is not scaled, and the
  // others share the shared capacity without it. With pool_spill it is scaled with them.
  EXPECT_EQ(svc_->ledger()->Snapshot("pooled")->effective_quota_bytes, 1ull << 30);
  EXPECT_EQ(svc_->ledger()->Snapshot("other")->effective_quota_bytes, 8 * kSlot);
  SetSpill(true);
  EXPECT_EQ(svc_->ledger()->Snapshot("pooled")->effective_quota_bytes, 4 * kSlot);
  EXPECT_EQ(svc_->ledger()->Snapshot("other")->effective_quota_bytes, 4 * kSlot);
}

TEST_F(PoolPlacementTest, AFullPoolEvictsOnlyTheTenantsOwnObjectsThereAndNeverSpills) {
  Start(8, 4, /*spill=*/false);
  SessionId p = Client("pooled"), o = Client("other");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Put(o, absl::StrCat("o", i)).ok());
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(Put(p, absl::StrCat("p", i)).ok()) << i;
    EXPECT_EQ(Where(p, absl::StrCat("p", i)), std::vector<uint64_t>{pool_seg_}) << i;
  }
  // The newest stay, the oldest went; the other tenant lost nothing and nothing spilled.
  EXPECT_FALSE(Where(p, "p11").empty());
  EXPECT_TRUE(Where(p, "p0").empty());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Where(o, absl::StrCat("o", i)).empty()) << i;
  EXPECT_EQ(UsedOf(shared_seg_), 3 * kSlot);
  EXPECT_GT(svc_->ledger()->Snapshot("pooled")->evicted_objects, 0u);
  EXPECT_EQ(svc_->ledger()->Snapshot("other")->evicted_objects, 0u);
}

TEST_F(PoolPlacementTest, AFullPoolWithNothingEvictableFailsNamingThePool) {
  Start(8, 2, /*spill=*/false);
  SessionId p = Client("pooled");
  ASSERT_TRUE(Put(p, "a", kPutFlagHardPin).ok());
  ASSERT_TRUE(Put(p, "b", kPutFlagHardPin).ok());
  absl::Status st = Put(p, "c");
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_NE(st.message().find("pool of tenant 'pooled' is full"), std::string::npos) << st;
  EXPECT_NE(st.message().find("pool_spill is false"), std::string::npos) << st;
  EXPECT_TRUE(Where(p, "c").empty());
  EXPECT_EQ(UsedOf(shared_seg_), 0u);  // the shared segment stayed empty
}

TEST_F(PoolPlacementTest, WithPoolSpillAFullPoolSpillsToSharedSegments) {
  Start(8, 2, /*spill=*/true);
  SessionId p = Client("pooled");
  ASSERT_TRUE(Put(p, "a").ok());
  ASSERT_TRUE(Put(p, "b").ok());
  EXPECT_EQ(Where(p, "a"), std::vector<uint64_t>{pool_seg_});
  EXPECT_EQ(Where(p, "b"), std::vector<uint64_t>{pool_seg_});
  ASSERT_TRUE(Put(p, "c").ok());
  EXPECT_EQ(Where(p, "c"), std::vector<uint64_t>{shared_seg_});  // spilled, nothing evicted
  EXPECT_FALSE(Where(p, "a").empty());
  // Turned off again: the next put evicts in the pool rather than spill.
  SetSpill(false);
  ASSERT_TRUE(Put(p, "d").ok());
  EXPECT_EQ(Where(p, "d"), std::vector<uint64_t>{pool_seg_});
  EXPECT_TRUE(Where(p, "a").empty());
}

TEST_F(PoolPlacementTest, OtherTenantsNeverUseAPoolNorEvictFromIt) {
  Start(2, 8, /*spill=*/false);
  SessionId p = Client("pooled"), o = Client("other");
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Put(p, absl::StrCat("p", i)).ok());
  // The other tenant fills the shared segment many times over: it evicts its own objects on
  // the shared segment, never the pooled tenant's and never into the pool.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Put(o, absl::StrCat("o", i)).ok()) << i;
    EXPECT_EQ(Where(o, absl::StrCat("o", i)), std::vector<uint64_t>{shared_seg_}) << i;
  }
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(Where(p, absl::StrCat("p", i)).empty()) << i;
  EXPECT_EQ(svc_->ledger()->Snapshot("pooled")->evicted_objects, 0u);
  // Above the watermark, the tick's eviction frees shared space only.
  svc_->Tick();
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(Where(p, absl::StrCat("p", i)).empty()) << i;
}

TEST_F(PoolPlacementTest, CopyOrMoveOfAnotherTenantToAPoolNodeIsRefused) {
  Start(8, 8, /*spill=*/false);
  Mount("shared-2", "", 8 * kSlot);
  SessionId p = Client("pooled"), o = Client("other");
  ASSERT_TRUE(Put(o, "k").ok());
  for (bool move : {false, true}) {
    absl::Status st = CopyTo(o, "k", "pool", move);
    EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
    EXPECT_NE(st.message().find("tenant 'pooled''s pool"), std::string::npos) << st;
    EXPECT_NE(st.message().find("tenant 'other'"), std::string::npos) << st;
  }
  EXPECT_EQ(Where(o, "k"), std::vector<uint64_t>{shared_seg_});
  // The pooled tenant, confined to its pool (no pool_spill), may not copy to a shared node...
  ASSERT_TRUE(Put(p, "own").ok());
  absl::Status st = CopyTo(p, "own", "shared-2", /*move=*/false);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_NE(st.message().find("pool_spill is false"), std::string::npos) << st;
  // ... but may once it may spill.
  SetSpill(true);
  EXPECT_TRUE(CopyTo(p, "own", "shared-2", /*move=*/false).ok());
}

TEST_F(PoolPlacementTest, APoolThatIsDownTakesNothingUnlessTheTenantMaySpill) {
  Start(8, 8, /*spill=*/false);
  SessionId p = Client("pooled");
  ASSERT_TRUE(Put(p, "a").ok());
  svc_->SessionClosed(node_sessions_[1]);  // the pool node goes
  absl::Status st = Put(p, "b");
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_NE(st.message().find("pool of tenant 'pooled' has no segment mounted"), std::string::npos)
      << st;
  SetSpill(true);
  ASSERT_TRUE(Put(p, "c").ok());
  EXPECT_EQ(Where(p, "c"), std::vector<uint64_t>{shared_seg_});
}

TEST_F(PoolPlacementTest, ATenantWithoutAPoolIsUnaffectedByPoolSpill) {
  Start(4, 0, /*spill=*/false);
  SessionId p = Client("pooled");
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(Put(p, absl::StrCat("k", i)).ok()) << i;
  EXPECT_EQ(Where(p, "k5"), std::vector<uint64_t>{shared_seg_});
}

// ---------------------------------------------------------------------------------------------
// Put on a pool, on master_fixture.h's MasterFixture: a `--pool=T` segment is tenant T's alone,
// and no part of the capacity that Puts of everyone can fill.

using PoolTest = MasterFixture;

TEST_F(PoolTest, PutPlacesOnlyTheOwnersObjectsOnAPool) {
  uint64_t pool_seg = 0;
  NodeWith("acme-node", kMiB, &pool_seg, "acme");
  SessionId acme = Client("acme");
  auto own = PutStart(acme, "k", ValueFor(64 * kKiB));
  ASSERT_EQ(Code(own.status), absl::StatusCode::kOk) << own.status.message;
  ASSERT_EQ(own.replicas.size(), 1u);
  EXPECT_EQ(own.replicas[0].segment_id, pool_seg);
  // Another tenant finds no segment it may use.
  EXPECT_EQ(Code(PutStart(Client("beta"), "k", ValueFor(64 * kKiB)).status),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(PoolTest, PoolSegmentsAreNotSharedCapacity) {
  opts_.eviction_high_watermark_ratio = 0.9;
  opts_.eviction_ratio = 0.05;
  opts_.client_ttl_ms = 3'600'000;
  NodeWith("shared", kMiB);
  NodeWith("beta-node", 4 * kMiB, nullptr, "beta");
  // Quotas scale against what Puts can fill: the shared megabyte.
  EXPECT_EQ(svc().capacity(), kMiB);
  EXPECT_EQ(svc().ledger()->capacity(), kMiB);
  // 15 x 64 KiB = 93.75% of the shared segment: above the watermark, so a Tick evicts.
  SessionId acme = Client("acme");
  for (int i = 0; i < 15; ++i) {
    Put(acme, absl::StrCat("k", i), ValueFor(64 * kKiB));
    clock_.AdvanceMs(1);
  }
  svc().Tick();
  EXPECT_EQ(Code(Exist(acme, "k0")), absl::StatusCode::kNotFound);
  EXPECT_LT(svc().GetStats().objects, 15u);
}

}  // namespace
}  // namespace granary::master
