// Quota admission in the master (docs/architecture.md section 5): the Evictor's admission paths
// (master/eviction.h) through the MasterService facade, in-process with a FakeClock
// (quota_fixture.h). Strict mode, the tenant's own eviction at its quota, and over-quota and
// closed tenants. What each path charges and gives back is object_store_charges_test's.

#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "master/master_service.h"
#include "master/tenant/quota_ledger.h"
#include "proto/messages.h"
#include "tests/unit/master/quota_fixture.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using proto::WireStatus;
using tenant::TenantSnapshot;
using test_calls::Code;

using EvictionQuotaTest = QuotaFixture;

// ---------------------------------------------------------------------------------------------
// Strict mode

TEST_F(EvictionQuotaTest, UnregisteredTenantIsRefusedWithTenantNotRegistered) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"tenant-a", kMiB}});
  SessionId ghost = Client("ghost-tenant");
  auto ps = PutStart(ghost, "k", 100);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted) << ps.status.message;
  EXPECT_EQ(ps.status.reason, ErrorReason::kTenantNotRegistered) << ps.status.message;
  EXPECT_TRUE(Has(ps.status.message, "ghost-tenant")) << ps.status.message;
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);
  EXPECT_FALSE(svc().ledger()->Snapshot("ghost-tenant").has_value());
  EXPECT_EQ(svc().ledger()->rejects_unregistered_total(), 1u);
  // A registered tenant writes.
  Put(Client("tenant-a"), "k", 100);
}

TEST_F(EvictionQuotaTest, DefaultTenantIsNotSpecialInStrictMode) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"tenant-a", kMiB}});
  SessionId d = Client("default");
  auto ps = PutStart(d, "k", 100);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted) << ps.status.message;
  EXPECT_EQ(ps.status.reason, ErrorReason::kTenantNotRegistered) << ps.status.message;
  EXPECT_TRUE(Has(ps.status.message, "default")) << ps.status.message;
  // Once the policy registers it, it is a tenant like any other.
  SetPolicy({{"tenant-a", kMiB}, {"default", kMiB}});
  Put(d, "k", 100);
  EXPECT_EQ(Snap("default").entries, 1u);
}

TEST_F(EvictionQuotaTest, EmptyPolicyRefusesEveryWrite) {
  NodeWith("n1", 4 * kMiB);
  SessionId c = Client("tenant-a");
  auto ps = PutStart(c, "k", 100);
  EXPECT_EQ(ps.status.reason, ErrorReason::kTenantNotRegistered) << ps.status.message;
}

TEST_F(EvictionQuotaTest, WithMultiTenantOffAnyTenantWritesAndIsStillCounted) {
  opts_.enable_multi_tenants = false;
  NodeWith("n1", 4 * kMiB);
  SessionId c = Client("anyone");
  Put(c, "k", 1000);
  TenantSnapshot s = Snap("anyone");
  EXPECT_EQ(s.charged_bytes, MasterService::AllocBytes(1000));
  EXPECT_EQ(s.entries, 1u);
  EXPECT_FALSE(s.over_quota);
  EXPECT_FALSE(s.has_explicit_policy);
}

// ---------------------------------------------------------------------------------------------
// At the quota: the tenant's own oldest objects make room

TEST_F(EvictionQuotaTest, QuotaExceededEvictsTheTenantsOwnOldestUnleasedObject) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"A", 4 * kObj + kObj / 2}, {"B", kMiB}});
  SessionId a = Client("A"), b = Client("B");
  // B's objects are the oldest in the cache.
  for (int i = 0; i < 3; ++i) {
    Put(b, absl::StrCat("b", i));
    clock_.AdvanceMs(10);
  }
  for (int i = 0; i < 4; ++i) {
    Put(a, absl::StrCat("a", i));
    clock_.AdvanceMs(10);
  }
  // a0 is the oldest by access, except that a reader touched it: a1 is now the oldest.
  auto g = Get(a, "a0");
  ASSERT_EQ(Code(g.status), absl::StatusCode::kOk);
  ASSERT_EQ(Code(GetEnd(a, "a0", g.generation)), absl::StatusCode::kOk);
  clock_.AdvanceMs(10);
  ASSERT_EQ(Snap("A").charged_bytes, 4 * kObj);

  auto ps = PutStart(a, "a4", kObjValue);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk) << ps.status.message;
  ASSERT_EQ(Code(PutEnd(a, "a4", ps.generation)), absl::StatusCode::kOk);
  EXPECT_FALSE(Exists(a, "a1"));
  for (const char* k : {"a0", "a2", "a3", "a4"}) EXPECT_TRUE(Exists(a, k)) << k;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Exists(b, absl::StrCat("b", i))) << i;
  TenantSnapshot s = Snap("A");
  EXPECT_EQ(s.charged_bytes, 4 * kObj);
  EXPECT_EQ(s.entries, 4u);
  EXPECT_LE(s.charged_bytes, s.effective_quota_bytes);
  EXPECT_EQ(Snap("B").charged_bytes, 3 * kObj);
  EXPECT_EQ(Snap("B").entries, 3u);
  EXPECT_EQ(Evictions("A", "quota"), 1u);
  EXPECT_EQ(Evictions("B", "quota"), 0u);
  EXPECT_TRUE(
      Has(metrics_.Render(), "granary_tenant_evictions_total{tenant_id=\"A\",reason=\"quota\"} 1"));
}

TEST_F(EvictionQuotaTest, QuotaExceededWithEveryObjectLeasedIsRejected) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"A", 4 * kObj + kObj / 2}, {"B", kMiB}});
  SessionId a = Client("A"), b = Client("B");
  Put(b, "b0");
  for (int i = 0; i < 4; ++i) {
    Put(a, absl::StrCat("a", i));
    ASSERT_EQ(Code(Get(a, absl::StrCat("a", i)).status), absl::StatusCode::kOk);  // no GetEnd
  }
  auto ps = PutStart(a, "a4", kObjValue);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted) << ps.status.message;
  EXPECT_EQ(ps.status.reason, ErrorReason::kQuotaExceeded) << ps.status.message;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(Exists(a, absl::StrCat("a", i))) << i;
  EXPECT_TRUE(Exists(b, "b0"));
  TenantSnapshot s = Snap("A");
  EXPECT_EQ(s.charged_bytes, 4 * kObj);
  EXPECT_EQ(s.inflight_bytes, 0u);
  EXPECT_GE(s.rejects_quota, 1u);
  EXPECT_EQ(Evictions("A", "quota"), 0u);
  EXPECT_EQ(Evictions("B", "quota"), 0u);
  // Once the leases run out, the same put makes room and succeeds.
  clock_.AdvanceMs(opts_.kv_lease_ttl_ms + 1);
  ps = PutStart(a, "a4", kObjValue);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kOk) << ps.status.message;
}

TEST_F(EvictionQuotaTest, InFlightPutsOfTheTenantAreNeverEvictedForItsQuota) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"A", 4 * kObj + kObj / 2}});
  SessionId a = Client("A");
  std::vector<uint64_t> gens;
  for (int i = 0; i < 4; ++i) {
    auto ps = PutStart(a, absl::StrCat("a", i), kObjValue);
    ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
    gens.push_back(ps.generation);
  }
  auto ps = PutStart(a, "a4", kObjValue);
  EXPECT_EQ(ps.status.reason, ErrorReason::kQuotaExceeded) << ps.status.message;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Code(PutEnd(a, absl::StrCat("a", i), gens[i])), absl::StatusCode::kOk) << i;
  }
  EXPECT_EQ(Snap("A").entries, 4u);
}

// A value that alone is larger than the tenant's effective quota can never be admitted:
// evicting the tenant's objects for it would destroy them for nothing.
TEST_F(EvictionQuotaTest, PutLargerThanTheWholeQuotaIsRejectedWithoutEvicting) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"A", 4 * kObj}});
  SessionId a = Client("A");
  for (int i = 0; i < 2; ++i) Put(a, absl::StrCat("a", i));
  auto ps = PutStart(a, "huge", ValueFor(5 * kObj));
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted) << ps.status.message;
  EXPECT_EQ(ps.status.reason, ErrorReason::kQuotaExceeded) << ps.status.message;
  EXPECT_TRUE(Exists(a, "a0"));
  EXPECT_TRUE(Exists(a, "a1"));
  EXPECT_EQ(Snap("A").entries, 2u);
  EXPECT_EQ(Evictions("A", "quota"), 0u);
}

// ---------------------------------------------------------------------------------------------
// Over quota (the quota was lowered below what the tenant holds)

TEST_F(EvictionQuotaTest, LoweredQuotaMakesTenantOverQuotaAndRefusesItsWrites) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"A", kMiB}, {"B", kMiB}});
  SessionId a = Client("A"), b = Client("B");
  for (int i = 0; i < 4; ++i) Put(a, absl::StrCat("a", i));
  SetPolicy({{"A", 2 * kObj}, {"B", kMiB}});
  TenantSnapshot s = Snap("A");
  EXPECT_TRUE(s.over_quota);
  EXPECT_EQ(s.charged_bytes, 4 * kObj);
  EXPECT_EQ(s.effective_quota_bytes, 2 * kObj);
  EXPECT_TRUE(svc().ledger()->IsOverQuota("A"));

  // Its writes are refused, whatever their size, and its data stays.
  for (uint64_t size : {uint64_t{1}, kObjValue}) {
    auto ps = PutStart(a, "new", size);
    EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted) << ps.status.message;
    EXPECT_EQ(ps.status.reason, ErrorReason::kQuotaExceeded) << ps.status.message;
  }
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(Exists(a, absl::StrCat("a", i))) << i;
  EXPECT_EQ(Snap("A").charged_bytes, 4 * kObj);
  EXPECT_GE(Snap("A").rejects_quota, 2u);
  // Other tenants are unaffected.
  Put(b, "b0");
  // Removing objects brings it back under its quota; then it writes again.
  ASSERT_EQ(Code(Remove(a, "a0")), absl::StatusCode::kOk);
  ASSERT_EQ(Code(Remove(a, "a1")), absl::StatusCode::kOk);
  EXPECT_FALSE(Snap("A").over_quota);
  // At its quota (not over): a put evicts its own oldest again.
  Put(a, "new");
  EXPECT_EQ(Snap("A").charged_bytes, 2 * kObj);
}

TEST_F(EvictionQuotaTest, OverQuotaTenantIsEvictedFirstUnderGlobalPressure) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"A", kMiB}, {"B", kMiB}});
  SessionId a = Client("A"), b = Client("B");
  // B's objects are older than A's.
  for (int i = 0; i < 4; ++i) {
    Put(b, absl::StrCat("b", i));
    clock_.AdvanceMs(10);
  }
  for (int i = 0; i < 4; ++i) {
    Put(a, absl::StrCat("a", i));
    clock_.AdvanceMs(10);
  }
  SetPolicy({{"A", 2 * kObj}, {"B", kMiB}});
  ASSERT_TRUE(Snap("A").over_quota);
  const uint64_t freed = svc().Evict(2 * kObj, "space");
  EXPECT_EQ(freed, 2 * kObj);
  // A's two oldest went; all of B's, older as they are, stayed.
  EXPECT_FALSE(Exists(a, "a0"));
  EXPECT_FALSE(Exists(a, "a1"));
  EXPECT_TRUE(Exists(a, "a2"));
  EXPECT_TRUE(Exists(a, "a3"));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(Exists(b, absl::StrCat("b", i))) << i;
  EXPECT_EQ(Evictions("A", "space"), 2u);
  EXPECT_EQ(Evictions("B", "space"), 0u);
  EXPECT_FALSE(Snap("A").over_quota);
  EXPECT_EQ(Snap("A").charged_bytes, 2 * kObj);
  // Not over quota any more: under plain LRU B's oldest go next.
  svc().Evict(kObj, "space");
  EXPECT_FALSE(Exists(b, "b0"));
  EXPECT_TRUE(Exists(a, "a2"));
}

// ---------------------------------------------------------------------------------------------
// A tenant dropped from the policy while it holds data

TEST_F(EvictionQuotaTest, DroppedTenantIsClosedButReadableAndRemovable) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"A", kMiB}, {"B", kMiB}});
  SessionId a = Client("A");
  Put(a, "a0");
  Put(a, "a1");
  SetPolicy({{"B", kMiB}});
  TenantSnapshot s = Snap("A");
  EXPECT_TRUE(s.admission_closed);
  EXPECT_FALSE(s.has_explicit_policy);
  EXPECT_EQ(s.entries, 2u);
  // Reads work.
  auto g = Get(a, "a0");
  ASSERT_EQ(Code(g.status), absl::StatusCode::kOk) << g.status.message;
  EXPECT_EQ(Code(GetEnd(a, "a0", g.generation)), absl::StatusCode::kOk);
  // Writes are refused.
  auto ps = PutStart(a, "a2", 100);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted) << ps.status.message;
  EXPECT_EQ(ps.status.reason, ErrorReason::kAdmissionClosed) << ps.status.message;
  EXPECT_TRUE(Exists(a, "a0"));  // and refusing evicted nothing
  EXPECT_TRUE(Exists(a, "a1"));
  EXPECT_EQ(Snap("A").rejects_closed, 1u);
  // Remove works; removing the last object forgets the account.
  ASSERT_EQ(Code(Remove(a, "a0")), absl::StatusCode::kOk);
  EXPECT_EQ(Snap("A").entries, 1u);
  ASSERT_EQ(Code(Remove(a, "a1")), absl::StatusCode::kOk);
  EXPECT_FALSE(svc().ledger()->Snapshot("A").has_value());
  // Without an account it is an unregistered tenant now.
  ps = PutStart(a, "a3", 100);
  EXPECT_EQ(ps.status.reason, ErrorReason::kTenantNotRegistered) << ps.status.message;
}

TEST_F(EvictionQuotaTest, DroppedTenantCanStillCommitAPutItHadInFlight) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"A", kMiB}, {"B", kMiB}});
  SessionId a = Client("A");
  auto ps = PutStart(a, "a0", 1000);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  SetPolicy({{"B", kMiB}});
  ASSERT_TRUE(Snap("A").admission_closed);
  ASSERT_EQ(Code(PutEnd(a, "a0", ps.generation)), absl::StatusCode::kOk);
  TenantSnapshot s = Snap("A");
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.charged_bytes, MasterService::AllocBytes(1000));
  EXPECT_EQ(s.inflight_bytes, 0u);
  // Registered again, it is open again and keeps its data and charge.
  SetPolicy({{"A", kMiB}, {"B", kMiB}});
  s = Snap("A");
  EXPECT_FALSE(s.admission_closed);
  EXPECT_EQ(s.entries, 1u);
  Put(a, "a1", 1000);
}

TEST_F(EvictionQuotaTest, DroppedTenantIsEvictedFirst) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"A", kMiB}, {"B", kMiB}});
  SessionId a = Client("A"), b = Client("B");
  for (int i = 0; i < 3; ++i) {
    Put(b, absl::StrCat("b", i));
    clock_.AdvanceMs(10);
  }
  for (int i = 0; i < 3; ++i) {
    Put(a, absl::StrCat("a", i));
    clock_.AdvanceMs(10);
  }
  SetPolicy({{"B", kMiB}});
  EXPECT_EQ(svc().Evict(2 * kObj, "space"), 2 * kObj);
  EXPECT_FALSE(Exists(a, "a0"));
  EXPECT_FALSE(Exists(a, "a1"));
  EXPECT_TRUE(Exists(a, "a2"));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Exists(b, absl::StrCat("b", i))) << i;
  EXPECT_EQ(Snap("A").entries, 1u);
  EXPECT_EQ(Snap("A").charged_bytes, kObj);
}

}  // namespace
}  // namespace granary::master
