// Quota admission in the MasterService (docs/architecture.md section 5), driven in-process with a
// FakeClock: strict mode, what is charged and when it is given back on every path, the tenant's own
// eviction at its quota, over-quota and closed tenants, effective quotas that follow capacity,
// and exact accounting under concurrent random operations.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/error_reason.h"
#include "common/metrics.h"
#include "master/master_service.h"
#include "master/tenant/policy.h"
#include "master/tenant/quota_ledger.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using proto::WireStatus;
using tenant::Policy;
using tenant::TenantPolicy;
using tenant::TenantSnapshot;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

using test_calls::Code;

bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Value size whose allocation (64-byte header + value) is exactly `alloc` bytes.
constexpr uint64_t ValueFor(uint64_t alloc) { return alloc - proto::kAllocHeaderSize; }
constexpr uint64_t kObj = 64 * kKiB;  // allocation of the standard test object
constexpr uint64_t kObjValue = ValueFor(kObj);

class QuotaServiceTest : public ::testing::Test {
 protected:
  QuotaServiceTest() {
    opts_.enable_multi_tenants = true;
    opts_.client_ttl_ms = 3'600'000;  // nothing expires unless a test says so
    opts_.put_start_timeout_ms = 600'000;
  }

  MasterService& svc() {
    if (!svc_) svc_ = std::make_unique<MasterService>(opts_, &clock_, &metrics_);
    return *svc_;
  }

  // Replaces the policy: {name, quota bytes} pairs.
  void SetPolicy(const std::vector<std::pair<std::string, uint64_t>>& tenants) {
    Policy p;
    for (const auto& [name, quota] : tenants) p.tenants.push_back({name, quota, std::nullopt});
    std::sort(p.tenants.begin(), p.tenants.end(),
              [](const TenantPolicy& a, const TenantPolicy& b) { return a.name < b.name; });
    svc().ledger()->ApplyPolicy(p, svc().capacity());
  }

  TenantSnapshot Snap(const std::string& tenant) {
    auto s = svc().ledger()->Snapshot(tenant);
    EXPECT_TRUE(s.has_value()) << "no account for " << tenant;
    return s.value_or(TenantSnapshot{});
  }

  proto::HelloReply Hello(SessionId sid, proto::Role role, const std::string& tenant) {
    proto::HelloRequest h;
    h.role = role;
    h.client_id = absl::StrCat("uuid-", sid);
    h.tenant_id = tenant;
    return svc().Hello(sid, h);
  }

  SessionId Client(const std::string& tenant) {
    SessionId sid = next_sid_++;
    auto rep = Hello(sid, proto::Role::kClient, tenant);
    EXPECT_EQ(Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    return sid;
  }

  // A node session with one segment of `size` bytes.
  SessionId NodeWith(const std::string& node_id, uint64_t size) {
    SessionId n = next_sid_++;
    auto h = Hello(n, proto::Role::kNode, "");
    EXPECT_EQ(Code(h.status), absl::StatusCode::kOk) << h.status.message;
    proto::MountSegmentRequest m;
    m.name = node_id + "-seg0";
    m.node_id = node_id;
    m.node_address = node_id + ":7000";
    m.base = 0x7f0000000000ull + (next_base_++) * 0x100000000ull;
    m.size = size;
    m.rkey = "rkey-" + node_id;
    m.worker_address = "worker-" + node_id;
    m.host_id = "host";
    auto rep = svc().MountSegment(n, m);
    EXPECT_EQ(Code(rep.status), absl::StatusCode::kOk) << rep.status.message;
    return n;
  }

  proto::PutStartResult PutStart(SessionId sid, const std::string& key, uint64_t size,
                                 int replicas = 1) {
    return test_calls::PutStart(svc(), sid, key, size, replicas);
  }
  WireStatus KeyGenOp(proto::BatchStatusReply (MasterService::*op)(SessionId,
                                                                   const proto::KeyGenRequest&),
                      SessionId sid, const std::string& key, uint64_t gen) {
    return test_calls::KeyGenOp(svc(), op, sid, key, gen);
  }
  WireStatus PutEnd(SessionId sid, const std::string& key, uint64_t gen) {
    return KeyGenOp(&MasterService::PutEnd, sid, key, gen);
  }
  WireStatus PutRevoke(SessionId sid, const std::string& key, uint64_t gen) {
    return KeyGenOp(&MasterService::PutRevoke, sid, key, gen);
  }
  WireStatus GetEnd(SessionId sid, const std::string& key, uint64_t gen) {
    return test_calls::KeyGenOp(svc(), &MasterService::GetEnd, sid, key, gen, leases_.Of(sid, key));
  }
  proto::GetResult Get(SessionId sid, const std::string& key) {
    return leases_.Took(sid, key, test_calls::Get(svc(), sid, key));
  }
  WireStatus KeysOp(proto::BatchStatusReply (MasterService::*op)(SessionId,
                                                                 const proto::KeysRequest&),
                    SessionId sid, const std::string& key) {
    return test_calls::KeysOp(svc(), op, sid, key);
  }
  WireStatus Exist(SessionId sid, const std::string& key) {
    return KeysOp(&MasterService::Exist, sid, key);
  }
  WireStatus Remove(SessionId sid, const std::string& key, bool force = false) {
    return test_calls::Remove(svc(), sid, key, force);
  }

  // PutStart + PutEnd; returns the generation.
  uint64_t Put(SessionId sid, const std::string& key, uint64_t size = kObjValue, int replicas = 1) {
    auto ps = PutStart(sid, key, size, replicas);
    EXPECT_EQ(Code(ps.status), absl::StatusCode::kOk) << key << ": " << ps.status.message;
    auto pe = PutEnd(sid, key, ps.generation);
    EXPECT_EQ(Code(pe), absl::StatusCode::kOk) << key << ": " << pe.message;
    return ps.generation;
  }

  bool Exists(SessionId sid, const std::string& key) {
    return Code(Exist(sid, key)) == absl::StatusCode::kOk;
  }

  uint64_t Evictions(const std::string& tenant, const std::string& reason) {
    return metrics_
        .Counter("granary_tenant_evictions_total", "", {{"tenant_id", tenant}, {"reason", reason}})
        ->value();
  }

  MasterOptions opts_;
  FakeClock clock_;
  MetricsRegistry metrics_;
  std::unique_ptr<MasterService> svc_;
  SessionId next_sid_ = 1;
  uint64_t next_base_ = 1;
  test_calls::LeaseTokens leases_;  // what each session's GetEnd echoes
};

// ---------------------------------------------------------------------------------------------
// Strict mode

TEST_F(QuotaServiceTest, UnregisteredTenantIsRefusedWithTenantNotRegistered) {
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

TEST_F(QuotaServiceTest, DefaultTenantIsNotSpecialInStrictMode) {
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

TEST_F(QuotaServiceTest, EmptyPolicyRefusesEveryWrite) {
  NodeWith("n1", 4 * kMiB);
  SessionId c = Client("tenant-a");
  auto ps = PutStart(c, "k", 100);
  EXPECT_EQ(ps.status.reason, ErrorReason::kTenantNotRegistered) << ps.status.message;
}

TEST_F(QuotaServiceTest, WithMultiTenantOffAnyTenantWritesAndIsStillCounted) {
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
// What is charged, and when it is given back

TEST_F(QuotaServiceTest, PutStartChargesAllocatedBytesTimesReplicasInFlight) {
  NodeWith("n1", 4 * kMiB);
  NodeWith("n2", 4 * kMiB);
  SetPolicy({{"tenant-a", 4 * kMiB}});
  SessionId c = Client("tenant-a");
  const uint64_t size = 1000;  // 64 + 1000 -> 1088 allocated
  ASSERT_EQ(MasterService::AllocBytes(size), 1088u);
  auto ps = PutStart(c, "k", size, 2);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk) << ps.status.message;
  TenantSnapshot s = Snap("tenant-a");
  EXPECT_EQ(s.charged_bytes, 2 * 1088u);
  EXPECT_EQ(s.inflight_bytes, 2 * 1088u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(svc().GetStats().used, s.charged_bytes);

  ASSERT_EQ(Code(PutEnd(c, "k", ps.generation)), absl::StatusCode::kOk);
  s = Snap("tenant-a");
  EXPECT_EQ(s.charged_bytes, 2 * 1088u);
  EXPECT_EQ(s.inflight_bytes, 0u);
  EXPECT_EQ(s.entries, 1u);
  // A second PutEnd changes nothing.
  PutEnd(c, "k", ps.generation);
  EXPECT_EQ(Snap("tenant-a").entries, 1u);
  EXPECT_EQ(Snap("tenant-a").charged_bytes, 2 * 1088u);
}

TEST_F(QuotaServiceTest, PutRevokeRefundsTheCharge) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"tenant-a", 4 * kMiB}});
  SessionId c = Client("tenant-a");
  auto ps = PutStart(c, "k", 5000);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  EXPECT_EQ(Snap("tenant-a").charged_bytes, MasterService::AllocBytes(5000));
  ASSERT_EQ(Code(PutRevoke(c, "k", ps.generation)), absl::StatusCode::kOk);
  TenantSnapshot s = Snap("tenant-a");
  EXPECT_EQ(s.charged_bytes, 0u);
  EXPECT_EQ(s.inflight_bytes, 0u);
  EXPECT_EQ(s.entries, 0u);
  // Revoking again refunds nothing twice.
  EXPECT_EQ(Code(PutRevoke(c, "k", ps.generation)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Snap("tenant-a").charged_bytes, 0u);
}

TEST_F(QuotaServiceTest, ExpiredPutIsRefundedAtItsDeadline) {
  opts_.put_start_timeout_ms = 1'000;
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"tenant-a", 4 * kMiB}});
  SessionId c = Client("tenant-a");
  auto ps = PutStart(c, "k", 5000);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  clock_.AdvanceMs(900);
  svc().Tick();
  EXPECT_EQ(Snap("tenant-a").inflight_bytes, MasterService::AllocBytes(5000));
  clock_.AdvanceMs(200);
  svc().Tick();
  TenantSnapshot s = Snap("tenant-a");
  EXPECT_EQ(s.charged_bytes, 0u);
  EXPECT_EQ(s.inflight_bytes, 0u);
  EXPECT_EQ(svc().GetStats().used, 0u);
  // The late PutEnd fails and commits nothing.
  EXPECT_EQ(Code(PutEnd(c, "k", ps.generation)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Snap("tenant-a").entries, 0u);
}

TEST_F(QuotaServiceTest, SessionClosedRefundsInFlightAndKeepsCommitted) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"tenant-a", 4 * kMiB}});
  SessionId c = Client("tenant-a");
  Put(c, "done", 1000);
  ASSERT_EQ(Code(PutStart(c, "open1", 2000).status), absl::StatusCode::kOk);
  ASSERT_EQ(Code(PutStart(c, "open2", 3000, 1).status), absl::StatusCode::kOk);
  svc().SessionClosed(c);
  TenantSnapshot s = Snap("tenant-a");
  EXPECT_EQ(s.charged_bytes, MasterService::AllocBytes(1000));
  EXPECT_EQ(s.inflight_bytes, 0u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(svc().GetStats().used, MasterService::AllocBytes(1000));
}

TEST_F(QuotaServiceTest, SilentSessionExpiryRefundsItsInFlightPuts) {
  opts_.client_ttl_ms = 10'000;
  SessionId node = NodeWith("n1", 4 * kMiB);
  SetPolicy({{"tenant-a", 4 * kMiB}});
  SessionId c = Client("tenant-a");
  ASSERT_EQ(Code(PutStart(c, "open", 2000).status), absl::StatusCode::kOk);
  clock_.AdvanceMs(10'001);
  svc().Heartbeat(node);
  auto dead = svc().Tick();
  ASSERT_EQ(dead, std::vector<SessionId>{c});
  EXPECT_EQ(Snap("tenant-a").charged_bytes, 0u);
}

TEST_F(QuotaServiceTest, RemoveReleasesTheCharge) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"tenant-a", 4 * kMiB}});
  SessionId c = Client("tenant-a");
  Put(c, "x", 1000);
  Put(c, "y", 2000);
  ASSERT_EQ(Code(Remove(c, "x")), absl::StatusCode::kOk);
  TenantSnapshot s = Snap("tenant-a");
  EXPECT_EQ(s.charged_bytes, MasterService::AllocBytes(2000));
  EXPECT_EQ(s.entries, 1u);
  // A refused Remove (leased) releases nothing.
  auto g = Get(c, "y");
  ASSERT_EQ(Code(g.status), absl::StatusCode::kOk);
  EXPECT_NE(Code(Remove(c, "y")), absl::StatusCode::kOk);
  EXPECT_EQ(Snap("tenant-a").entries, 1u);
  GetEnd(c, "y", g.generation);
  ASSERT_EQ(Code(Remove(c, "y")), absl::StatusCode::kOk);
  s = Snap("tenant-a");
  EXPECT_EQ(s.charged_bytes, 0u);
  EXPECT_EQ(s.entries, 0u);
}

TEST_F(QuotaServiceTest, FailedAllocationRefundsTheCharge) {
  NodeWith("n1", 4 * kMiB);  // one node: two replicas cannot be placed
  SetPolicy({{"tenant-a", 4 * kMiB}});
  SessionId c = Client("tenant-a");
  auto ps = PutStart(c, "k", 1000, 2);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted) << ps.status.message;
  EXPECT_NE(ps.status.reason, ErrorReason::kQuotaExceeded) << ps.status.message;
  EXPECT_EQ(Snap("tenant-a").charged_bytes, 0u);
  EXPECT_EQ(Snap("tenant-a").inflight_bytes, 0u);
}

TEST_F(QuotaServiceTest, PutOfAnExistingKeyChargesNothing) {
  NodeWith("n1", 4 * kMiB);
  SetPolicy({{"tenant-a", 4 * kMiB}});
  SessionId c = Client("tenant-a");
  Put(c, "k", 1000);
  ASSERT_EQ(Code(PutStart(c, "open", 1000).status), absl::StatusCode::kOk);
  const uint64_t before = Snap("tenant-a").charged_bytes;
  EXPECT_EQ(Code(PutStart(c, "k", 1000).status), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Code(PutStart(c, "open", 1000).status), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Snap("tenant-a").charged_bytes, before);
}

TEST_F(QuotaServiceTest, NodeLossReleasesCommittedAndRefundsInFlightBytesOnIt) {
  SessionId node = NodeWith("n1", 4 * kMiB);
  SetPolicy({{"tenant-a", 4 * kMiB}});
  SessionId c = Client("tenant-a");
  Put(c, "done", 1000);
  auto open = PutStart(c, "open", 2000);
  ASSERT_EQ(Code(open.status), absl::StatusCode::kOk);
  svc().SessionClosed(node);
  TenantSnapshot s = Snap("tenant-a");
  EXPECT_EQ(s.charged_bytes, 0u);
  EXPECT_EQ(s.inflight_bytes, 0u);
  EXPECT_EQ(s.entries, 0u);
  // The put whose only replica was lost cannot complete, and nothing is refunded twice.
  EXPECT_EQ(Code(PutEnd(c, "open", open.generation)), absl::StatusCode::kNotFound);
  svc().SessionClosed(c);
  EXPECT_EQ(Snap("tenant-a").charged_bytes, 0u);
  EXPECT_EQ(Snap("tenant-a").entries, 0u);
}

TEST_F(QuotaServiceTest, LosingOneOfTwoReplicasReleasesHalfAndKeepsTheEntry) {
  SessionId n1 = NodeWith("n1", 4 * kMiB);
  NodeWith("n2", 4 * kMiB);
  SetPolicy({{"tenant-a", 8 * kMiB}});
  SessionId c = Client("tenant-a");
  const uint64_t ax = MasterService::AllocBytes(1000), ay = MasterService::AllocBytes(3000);
  Put(c, "x", 1000, 2);
  auto y = PutStart(c, "y", 3000, 2);
  ASSERT_EQ(Code(y.status), absl::StatusCode::kOk);
  ASSERT_EQ(Snap("tenant-a").charged_bytes, 2 * ax + 2 * ay);

  svc().SessionClosed(n1);
  TenantSnapshot s = Snap("tenant-a");
  EXPECT_EQ(s.charged_bytes, ax + ay);  // one replica of each is gone
  EXPECT_EQ(s.inflight_bytes, ay);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_TRUE(Exists(c, "x"));
  // The put completes with the replica it has left, and commits only that.
  ASSERT_EQ(Code(PutEnd(c, "y", y.generation)), absl::StatusCode::kOk);
  s = Snap("tenant-a");
  EXPECT_EQ(s.charged_bytes, ax + ay);
  EXPECT_EQ(s.inflight_bytes, 0u);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(svc().GetStats().used, ax + ay);
  ASSERT_EQ(Code(Remove(c, "x")), absl::StatusCode::kOk);
  ASSERT_EQ(Code(Remove(c, "y")), absl::StatusCode::kOk);
  s = Snap("tenant-a");
  EXPECT_EQ(s.charged_bytes, 0u);
  EXPECT_EQ(s.entries, 0u);
}

TEST_F(QuotaServiceTest, RevokeAfterLosingOneReplicaRefundsTheRest) {
  SessionId n1 = NodeWith("n1", 4 * kMiB);
  NodeWith("n2", 4 * kMiB);
  SetPolicy({{"tenant-a", 8 * kMiB}});
  SessionId c = Client("tenant-a");
  auto y = PutStart(c, "y", 3000, 2);
  ASSERT_EQ(Code(y.status), absl::StatusCode::kOk);
  svc().SessionClosed(n1);
  EXPECT_EQ(Snap("tenant-a").inflight_bytes, MasterService::AllocBytes(3000));
  ASSERT_EQ(Code(PutRevoke(c, "y", y.generation)), absl::StatusCode::kOk);
  EXPECT_EQ(Snap("tenant-a").charged_bytes, 0u);
  EXPECT_EQ(Snap("tenant-a").inflight_bytes, 0u);
}

// ---------------------------------------------------------------------------------------------
// At the quota: the tenant's own oldest objects make room

TEST_F(QuotaServiceTest, QuotaExceededEvictsTheTenantsOwnOldestUnleasedObject) {
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

TEST_F(QuotaServiceTest, QuotaExceededWithEveryObjectLeasedIsRejected) {
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

TEST_F(QuotaServiceTest, InFlightPutsOfTheTenantAreNeverEvictedForItsQuota) {
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
TEST_F(QuotaServiceTest, PutLargerThanTheWholeQuotaIsRejectedWithoutEvicting) {
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

TEST_F(QuotaServiceTest, LoweredQuotaMakesTenantOverQuotaAndRefusesItsWrites) {
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

TEST_F(QuotaServiceTest, OverQuotaTenantIsEvictedFirstUnderGlobalPressure) {
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

TEST_F(QuotaServiceTest, DroppedTenantIsClosedButReadableAndRemovable) {
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

TEST_F(QuotaServiceTest, DroppedTenantCanStillCommitAPutItHadInFlight) {
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

TEST_F(QuotaServiceTest, DroppedTenantIsEvictedFirst) {
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

// ---------------------------------------------------------------------------------------------
// Effective quota follows capacity

TEST_F(QuotaServiceTest, EffectiveQuotaIsRecomputedOnMountAndOnNodeLoss) {
  SessionId n1 = NodeWith("n1", kMiB);
  SetPolicy({{"A", kMiB}, {"B", kMiB}});
  EXPECT_EQ(Snap("A").effective_quota_bytes, kMiB / 2);
  EXPECT_EQ(Snap("B").effective_quota_bytes, kMiB / 2);
  EXPECT_EQ(svc().ledger()->capacity(), kMiB);
  SessionId n2 = NodeWith("n2", kMiB);
  EXPECT_EQ(Snap("A").effective_quota_bytes, kMiB);
  EXPECT_EQ(Snap("B").effective_quota_bytes, kMiB);
  // A third tenant: three requests of 1 MiB share 2 MiB.
  SetPolicy({{"A", kMiB}, {"B", kMiB}, {"C", kMiB}});
  // 2 MiB / 3: 699050 each and 2 bytes left over, to the first names (equal remainders).
  EXPECT_EQ(Snap("A").effective_quota_bytes, 699051u);
  EXPECT_EQ(Snap("B").effective_quota_bytes, 699051u);
  EXPECT_EQ(Snap("C").effective_quota_bytes, 699050u);
  svc().SessionClosed(n2);
  EXPECT_EQ(svc().ledger()->capacity(), kMiB);
  EXPECT_EQ(Snap("A").effective_quota_bytes, 349526u);
  EXPECT_EQ(Snap("B").effective_quota_bytes, 349525u);
  EXPECT_EQ(Snap("C").effective_quota_bytes, 349525u);
  svc().SessionClosed(n1);
  EXPECT_EQ(Snap("A").effective_quota_bytes, 0u);
}

TEST_F(QuotaServiceTest, NodeLossThatShrinksTheQuotaBelowTheChargeMakesTheTenantOverQuota) {
  NodeWith("n1", 2 * kMiB);
  SetPolicy({{"A", kMiB}, {"B", kMiB}});
  SessionId a = Client("A");
  // All of A's objects are on n1, the only node when they were written.
  for (int i = 0; i < 16; ++i) Put(a, absl::StrCat("a", i));
  ASSERT_EQ(Snap("A").charged_bytes, kMiB);
  SessionId n2 = NodeWith("n2", kMiB);
  SetPolicy({{"A", kMiB}, {"B", kMiB}, {"C", kMiB}});  // 3 MiB over 3 MiB: unscaled
  ASSERT_EQ(Snap("A").effective_quota_bytes, kMiB);
  ASSERT_FALSE(Snap("A").over_quota);
  svc().SessionClosed(n2);  // 3 MiB requested over 2 MiB now
  TenantSnapshot s = Snap("A");
  EXPECT_EQ(s.effective_quota_bytes, 699051u);
  EXPECT_EQ(s.charged_bytes, kMiB);  // nothing of A was on n2
  EXPECT_EQ(s.entries, 16u);
  EXPECT_TRUE(s.over_quota);
  auto ps = PutStart(a, "more", 1);
  EXPECT_EQ(ps.status.reason, ErrorReason::kQuotaExceeded) << ps.status.message;
  EXPECT_EQ(Snap("A").entries, 16u);
}

TEST_F(QuotaServiceTest, NodeLossReleasesTheLostHalfOfTwoReplicaObjects) {
  NodeWith("n1", kMiB);
  SessionId n2 = NodeWith("n2", kMiB);
  SetPolicy({{"A", 2 * kMiB}});
  SessionId a = Client("A");
  for (int i = 0; i < 6; ++i) Put(a, absl::StrCat("a", i), kObjValue, 2);
  ASSERT_EQ(Snap("A").charged_bytes, 12 * kObj);
  svc().SessionClosed(n2);
  TenantSnapshot s = Snap("A");
  EXPECT_EQ(s.effective_quota_bytes, kMiB);
  EXPECT_EQ(s.charged_bytes, 6 * kObj);
  EXPECT_EQ(s.entries, 6u);
  EXPECT_FALSE(s.over_quota);
}

// ---------------------------------------------------------------------------------------------
// Concurrency: charged never passes the effective quota, and at rest it is exact.

TEST_F(QuotaServiceTest, ConcurrentRandomOperationsKeepChargesWithinQuotaAndExact) {
  opts_.put_start_timeout_ms = 2'000;  // deadlines fire during the run
  opts_.kv_lease_ttl_ms = 1'000;
  opts_.client_ttl_ms = 24 * 3'600'000;
  // Revoked and expired puts free their space at once: with a hold, how much is held depends on
  // how many operations the threads get through between two ticks, which the machine decides.
  opts_.aborted_put_hold_ms = 0;
  NodeWith("n1", kMiB);
  NodeWith("n2", kMiB);
  const std::vector<std::string> kTenants = {"t0", "t1", "t2"};
  // 3 MiB requested over 2 MiB: scaled to ~683 KiB each. Small enough that quota eviction,
  // quota rejects and space eviction all happen.
  SetPolicy({{"t0", kMiB}, {"t1", kMiB}, {"t2", kMiB}});
  MasterService& s = svc();
  constexpr int kThreads = 8;
  constexpr int kOps = 3000;
  constexpr int kKeys = 48;

  std::atomic<SessionId> next_sid{1000};
  std::atomic<int> ready{0};
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::atomic<uint64_t> samples{0}, violations{0};
  std::mutex first_mu;
  std::string first_violation;
  std::vector<SessionId> final_sessions(kThreads);

  auto hello = [&](const std::string& tenant) {
    SessionId sid = next_sid.fetch_add(1);
    proto::HelloRequest h;
    h.role = proto::Role::kClient;
    h.client_id = absl::StrCat("c", sid);
    h.tenant_id = tenant;
    if (s.Hello(sid, h).status.code != 0) ++failures;
    return sid;
  };

  std::thread sampler([&] {
    while (!done.load()) {
      for (const TenantSnapshot& t : s.ledger()->SnapshotAll()) {
        ++samples;
        if (t.charged_bytes > t.effective_quota_bytes || t.over_quota) {
          if (violations.fetch_add(1) == 0) {
            std::lock_guard<std::mutex> l(first_mu);
            first_violation = absl::StrCat(t.tenant_id, ": charged ", t.charged_bytes,
                                           " > effective ", t.effective_quota_bytes);
          }
        }
      }
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(777 + t);
      const std::string tenant = kTenants[t % kTenants.size()];
      SessionId sid = hello(tenant);
      // Start together, so that the threads really overlap.
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      std::vector<std::pair<std::string, uint64_t>> puts;
      std::vector<proto::KeyGen> reads;  // the leases taken, as GetEnd echoes them
      auto key = [&] { return absl::StrCat("k", rng() % kKeys); };
      for (int i = 0; i < kOps; ++i) {
        switch (rng() % 12) {
          case 0:
          case 1:
          case 2: {
            proto::PutStartRequest r;
            r.entries.push_back({key(), 1 + rng() % (96 * kKiB)});
            if (rng() % 8 == 0) r.entries.push_back({key(), 1 + rng() % (16 * kKiB)});
            r.replica_num = static_cast<uint8_t>(1 + rng() % 2);
            auto rep = s.PutStart(sid, r);
            if (rep.status.code != 0 || rep.results.size() != r.entries.size()) {
              ++failures;
              break;
            }
            for (size_t j = 0; j < rep.results.size(); ++j) {
              const auto& res = rep.results[j];
              if (res.status.code == 0) {
                puts.emplace_back(r.entries[j].key, res.generation);
              } else if (res.status.ToStatus().code() != absl::StatusCode::kAlreadyExists &&
                         res.status.ToStatus().code() != absl::StatusCode::kResourceExhausted) {
                ++failures;
              }
            }
            break;
          }
          case 3:
          case 4:
            if (!puts.empty()) {
              size_t j = rng() % puts.size();
              proto::KeyGenRequest r;
              r.entries.push_back({puts[j].first, puts[j].second});
              puts.erase(puts.begin() + j);
              s.PutEnd(sid, r);
            }
            break;
          case 5:
            if (!puts.empty()) {
              proto::KeyGenRequest r;
              r.entries.push_back({puts.back().first, puts.back().second});
              puts.pop_back();
              s.PutRevoke(sid, r);
            }
            break;
          case 6: {
            proto::RemoveRequest r;
            r.keys.push_back(key());
            s.Remove(sid, r);
            break;
          }
          case 7: {
            proto::GetRequest r;
            r.keys.push_back(key());
            auto rep = s.Get(sid, r);
            if (rep.results.size() == 1 && rep.results[0].status.code == 0) {
              reads.push_back({r.keys[0], rep.results[0].generation, rep.results[0].lease_token});
            }
            break;
          }
          case 8:
            if (!reads.empty()) {
              proto::KeyGenRequest r;
              r.entries.push_back(reads.back());
              reads.pop_back();
              s.GetEnd(sid, r);
            }
            break;
          case 9:
            if (rng() % 4 == 0) {  // the connection drops; the client reconnects
              s.SessionClosed(sid);
              puts.clear();
              reads.clear();
              sid = hello(tenant);
            }
            break;
          case 10:
          case 11:
            clock_.AdvanceMs(static_cast<int64_t>(rng() % 40));
            s.Tick();
            break;
        }
      }
      final_sessions[t] = sid;
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  sampler.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(samples.load(), 0u);
  EXPECT_EQ(violations.load(), 0u) << first_violation;

  // Quiescence: every client session goes (refunding what it had in flight).
  for (SessionId sid : final_sessions) s.SessionClosed(sid);
  clock_.AdvanceMs(opts_.put_start_timeout_ms + 1);
  s.Tick();

  uint64_t total_charged = 0;
  uint64_t quota_evictions = 0, quota_rejects = 0;
  for (const std::string& tenant : kTenants) {
    SessionId sid = hello(tenant);
    proto::ListRequest lr;
    lr.limit = proto::kMaxListLimit;
    auto all = s.List(sid, lr);
    ASSERT_EQ(all.status.code, 0) << all.status.message;
    ASSERT_FALSE(all.more);
    uint64_t bytes = 0, complete = 0;
    for (const auto& o : all.objects) {
      EXPECT_EQ(o.state, ObjectState::kComplete)
          << tenant << " " << o.key << " still in progress after its writer left";
      if (o.state != ObjectState::kComplete) continue;
      bytes += MasterService::AllocBytes(o.size) * o.replica_count;
      ++complete;
    }
    auto snap = s.ledger()->Snapshot(tenant);
    ASSERT_TRUE(snap.has_value()) << tenant;
    EXPECT_EQ(snap->charged_bytes, bytes) << tenant;
    EXPECT_EQ(snap->inflight_bytes, 0u) << tenant;
    EXPECT_EQ(snap->entries, complete) << tenant;
    EXPECT_LE(snap->charged_bytes, snap->effective_quota_bytes) << tenant;
    total_charged += snap->charged_bytes;
    quota_evictions += Evictions(tenant, "quota");
    quota_rejects += snap->rejects_quota;
    s.SessionClosed(sid);
  }
  EXPECT_EQ(s.GetStats().used, total_charged);
  EXPECT_EQ(s.GetStats().processing, 0u);
  // The run exercised the quota paths it is meant to test.
  EXPECT_GT(quota_evictions, 0u);
  EXPECT_GT(quota_rejects, 0u);
  EXPECT_GT(metrics_.Counter("granary_master_put_expired_total", "")->value(), 0u);
  EXPECT_GT(metrics_.Counter("granary_master_ops_total", "", {{"op", "put_end"}})->value(), 1000u);
}

}  // namespace
}  // namespace granary::master
