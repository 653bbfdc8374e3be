// The master's objects and leases (master/object_store.h) through the MasterService facade: the
// put lifecycle and its validation, replica placement, put deadlines, node loss, read leases, and
// tenant-scoped keys and listings. In-process with a FakeClock (master_fixture.h).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "master/master_service.h"
#include "master/tenant/policy.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "tests/unit/master/master_fixture.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using proto::ReplicaDesc;
using proto::WireStatus;
using test_calls::Code;

using ObjectStoreTest = MasterFixture;

// ---------------------------------------------------------------------------------------------
// Put lifecycle

TEST_F(ObjectStoreTest, PutLifecycleStartEndGetExistRemove) {
  uint64_t seg = 0;
  NodeWith("n1", kMiB, &seg);
  SessionId c = Client();
  const uint64_t kSize = 1000;

  auto ps = PutStart(c, "key", kSize);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk) << ps.status.message;
  EXPECT_NE(ps.generation, 0u);
  ASSERT_EQ(ps.replicas.size(), 1u);
  EXPECT_EQ(ps.replicas[0].segment_id, seg);
  ExpectInside(ps.replicas, kSize);
  EXPECT_GT(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().processing, 1u);
  EXPECT_EQ(svc().GetStats().pending_deadlines, 1u);

  // Not readable before PutEnd.
  EXPECT_EQ(Code(Get(c, "key").status), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Exist(c, "key")), absl::StatusCode::kNotFound);
  // Not removable while in progress, and not startable twice.
  EXPECT_EQ(Code(Remove(c, "key")), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Code(PutStart(c, "key", kSize).status), absl::StatusCode::kAlreadyExists);
  // PutEnd of the wrong generation is refused and commits nothing.
  EXPECT_EQ(Code(PutEnd(c, "key", ps.generation + 1)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Get(c, "key").status), absl::StatusCode::kNotFound);

  ASSERT_EQ(Code(PutEnd(c, "key", ps.generation)), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().processing, 0u);
  EXPECT_EQ(svc().GetStats().objects, 1u);
  // The committed put's deadline is moot: the wheel no longer holds it.
  EXPECT_EQ(svc().GetStats().pending_deadlines, 0u);

  auto g = Get(c, "key");
  ASSERT_EQ(Code(g.status), absl::StatusCode::kOk) << g.status.message;
  EXPECT_EQ(g.generation, ps.generation);
  EXPECT_EQ(g.size, kSize);
  EXPECT_EQ(g.lease_ms, static_cast<uint32_t>(opts_.kv_lease_ttl_ms));
  ASSERT_EQ(g.replicas.size(), ps.replicas.size());
  EXPECT_EQ(g.replicas[0].segment_id, ps.replicas[0].segment_id);
  EXPECT_EQ(g.replicas[0].address, ps.replicas[0].address);
  EXPECT_EQ(g.replicas[0].length, ps.replicas[0].length);
  EXPECT_EQ(Code(GetEnd(c, "key", g.generation)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Exist(c, "key")), absl::StatusCode::kOk);

  // Complete objects are immutable: a second PutStart is refused.
  auto again = PutStart(c, "key", kSize);
  EXPECT_EQ(Code(again.status), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(Has(again.status.message, "key")) << again.status.message;

  ASSERT_EQ(Code(Remove(c, "key")), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);
  EXPECT_EQ(Code(Get(c, "key").status), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Exist(c, "key")), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Remove(c, "key")), absl::StatusCode::kNotFound);
  // The key can be written again, with a new generation.
  auto ps2 = PutStart(c, "key", kSize);
  ASSERT_EQ(Code(ps2.status), absl::StatusCode::kOk);
  EXPECT_NE(ps2.generation, ps.generation);
}

TEST_F(ObjectStoreTest, PutRevokeFreesTheAllocation) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  auto ps = PutStart(c, "k", 5000);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  EXPECT_EQ(Code(PutRevoke(c, "k", ps.generation + 1)), absl::StatusCode::kNotFound);
  EXPECT_GT(svc().GetStats().used, 0u);
  EXPECT_EQ(Code(PutRevoke(c, "k", ps.generation)), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);
  EXPECT_EQ(Code(PutEnd(c, "k", ps.generation)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(PutRevoke(c, "k", ps.generation)), absl::StatusCode::kNotFound);
  // A complete object cannot be revoked.
  uint64_t gen = Put(c, "k2", 10);
  EXPECT_EQ(Code(PutRevoke(c, "k2", gen)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Exist(c, "k2")), absl::StatusCode::kOk);
}

TEST_F(ObjectStoreTest, ConcurrentAllocationsDoNotOverlap) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (int i = 0; i < 50; ++i) {
    uint64_t size = 100 + 397 * i;
    auto ps = PutStart(c, absl::StrCat("k", i), size);
    ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk) << i << ": " << ps.status.message;
    ExpectInside(ps.replicas, size);
    ranges.emplace_back(ps.replicas[0].address, ps.replicas[0].address + ps.replicas[0].length);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
}

TEST_F(ObjectStoreTest, BatchPutStartReportsPerKey) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  proto::PutStartRequest r;
  r.entries = {{"good1", 10}, {"", 10}, {"good2", 0}, {"good3", 20}};
  auto rep = svc().PutStart(c, r);
  ASSERT_EQ(Code(rep.status), absl::StatusCode::kOk);
  ASSERT_EQ(rep.results.size(), 4u);
  EXPECT_EQ(Code(rep.results[0].status), absl::StatusCode::kOk);
  EXPECT_EQ(Code(rep.results[1].status), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(rep.results[2].status), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Code(rep.results[3].status), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().processing, 2u);
}

// ---------------------------------------------------------------------------------------------
// Validation

TEST_F(ObjectStoreTest, APutBeforeAnyNodeMountsSaysSoAlsoUnderQuota) {
  opts_.enable_multi_tenants = true;
  SessionId c = Client("acme");
  tenant::Policy p;
  p.tenants.push_back({"acme", 1ull << 30, std::nullopt});
  svc().ledger()->ApplyPolicy(p, svc().capacity());
  auto r = PutStart(c, "k", 1000);
  EXPECT_EQ(Code(r.status), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Has(r.status.message, "no node has mounted a segment yet")) << r.status.message;
  EXPECT_EQ(svc().ledger()->Snapshot("acme")->charged_bytes, 0u) << "refused, yet charged";
  // Once a node has mounted, the same put is admitted.
  NodeWith("n1", kMiB);
  r = PutStart(c, "k", 1000);
  EXPECT_EQ(Code(r.status), absl::StatusCode::kOk) << r.status.message;
}

TEST_F(ObjectStoreTest, PutStartValidatesSizeKeyAndReplicaNum) {
  NodeWith("n1", kMiB);
  NodeWith("n2", kMiB);
  SessionId c = Client();
  const auto kIA = absl::StatusCode::kInvalidArgument;

  auto r = PutStart(c, "k", 0);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, "size 0")) << r.status.message;

  r = PutStart(c, "k", proto::kMaxValueBytes + 1);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, absl::StrCat(proto::kMaxValueBytes + 1))) << r.status.message;

  r = PutStart(c, "", 10);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, "key")) << r.status.message;

  r = PutStart(c, std::string(proto::kMaxKeyBytes + 1, 'k'), 10);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, absl::StrCat(proto::kMaxKeyBytes + 1))) << r.status.message;

  r = PutStart(c, "k", 10, 0);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, "replica_num 0")) << r.status.message;

  r = PutStart(c, "k", 10, 9);
  EXPECT_EQ(Code(r.status), kIA);
  EXPECT_TRUE(Has(r.status.message, "replica_num 9")) << r.status.message;

  // Nothing was allocated by the refused requests.
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);

  // The limits themselves are accepted.
  EXPECT_EQ(Code(PutStart(c, std::string(proto::kMaxKeyBytes, 'k'), 1).status),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code(PutStart(c, "two", 1, 2).status), absl::StatusCode::kOk);
}

// ---------------------------------------------------------------------------------------------
// Replicas

TEST_F(ObjectStoreTest, TwoReplicasLandOnDistinctNodes) {
  // Node A has two segments, node B one: both replicas must never sit on node A.
  SessionId a = Node();
  Mount(a, "nodeA", "a0", 0x100000000ull, kMiB);
  Mount(a, "nodeA", "a1", 0x200000000ull, kMiB);
  SessionId b = Node();
  Mount(b, "nodeB", "b0", 0x300000000ull, kMiB);
  SessionId c = Client();
  for (int i = 0; i < 12; ++i) {
    auto ps = PutStart(c, absl::StrCat("k", i), 1000, 2);
    ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk) << ps.status.message;
    ASSERT_EQ(ps.replicas.size(), 2u);
    ExpectInside(ps.replicas, 1000);
    EXPECT_NE(ps.replicas[0].segment_id, ps.replicas[1].segment_id);
    EXPECT_NE(segment_node_[ps.replicas[0].segment_id], segment_node_[ps.replicas[1].segment_id]);
    ASSERT_EQ(Code(PutEnd(c, absl::StrCat("k", i), ps.generation)), absl::StatusCode::kOk);
    auto g = Get(c, absl::StrCat("k", i));
    ASSERT_EQ(g.replicas.size(), 2u);
    ASSERT_EQ(Code(GetEnd(c, absl::StrCat("k", i), g.generation)), absl::StatusCode::kOk);
  }
}

TEST_F(ObjectStoreTest, TwoReplicasOnOneNodeFailNamingTheNodeCount) {
  SessionId a = Node();
  Mount(a, "nodeA", "a0", 0x100000000ull, kMiB);
  Mount(a, "nodeA", "a1", 0x200000000ull, kMiB);
  SessionId c = Client();
  auto ps = PutStart(c, "k", 1000, 2);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(ps.status.message, "1 node")) << ps.status.message;
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);
}

// A put that no amount of eviction could place must not evict anything.
TEST_F(ObjectStoreTest, ImpossibleReplicaCountDoesNotEvict) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  for (int i = 0; i < 8; ++i) Put(c, absl::StrCat("k", i), ValueFor(64 * kKiB));
  const auto before = svc().GetStats();
  auto ps = PutStart(c, "two", 1000, 2);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(svc().GetStats().objects, before.objects);
  EXPECT_EQ(svc().GetStats().used, before.used);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(Code(Exist(c, absl::StrCat("k", i))), absl::StatusCode::kOk);
}

TEST_F(ObjectStoreTest, ValueLargerThanEverySegmentDoesNotEvict) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  for (int i = 0; i < 8; ++i) Put(c, absl::StrCat("k", i), ValueFor(64 * kKiB));
  const auto before = svc().GetStats();
  auto ps = PutStart(c, "huge", 2 * kMiB);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(svc().GetStats().objects, before.objects);
  EXPECT_EQ(svc().GetStats().used, before.used);
}

// ---------------------------------------------------------------------------------------------
// Deadlines

TEST_F(ObjectStoreTest, PutDeadlineFreesUncommittedAllocation) {
  opts_.put_start_timeout_ms = 30'000;
  opts_.client_ttl_ms = 600'000;  // the silent node must not expire here
  NodeWith("n1", kMiB);
  SessionId c = Client();
  svc().Tick();
  auto ps = PutStart(c, "k", 4000);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  const uint64_t used = svc().GetStats().used;
  ASSERT_GT(used, 0u);

  // Before the deadline nothing is freed, however often Tick runs.
  for (int i = 0; i < 29; ++i) {
    clock_.AdvanceMs(1000);
    svc().Heartbeat(c);
    svc().Tick();
  }
  clock_.AdvanceMs(999);
  svc().Heartbeat(c);
  svc().Tick();
  EXPECT_EQ(svc().GetStats().used, used);
  EXPECT_EQ(svc().GetStats().processing, 1u);

  clock_.AdvanceMs(2);
  svc().Heartbeat(c);
  svc().Tick();
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);
  EXPECT_EQ(Code(PutEnd(c, "k", ps.generation)), absl::StatusCode::kNotFound);
  // The key is free again.
  EXPECT_EQ(Code(PutStart(c, "k", 4000).status), absl::StatusCode::kOk);
}

// The first Tick may come long after the PutStart (a master that just started, a stalled
// ticker): the deadline must still fire.
TEST_F(ObjectStoreTest, PutDeadlineFiresWhenFirstTickIsLate) {
  opts_.put_start_timeout_ms = 30'000;
  opts_.client_ttl_ms = 600'000;
  NodeWith("n1", kMiB);
  SessionId c = Client();
  auto ps = PutStart(c, "k", 4000);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  clock_.AdvanceMs(35'000);
  svc().Tick();
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(Code(PutEnd(c, "k", ps.generation)), absl::StatusCode::kNotFound);
}

TEST_F(ObjectStoreTest, CommittedPutSurvivesItsDeadline) {
  opts_.put_start_timeout_ms = 1'000;
  opts_.client_ttl_ms = 600'000;
  NodeWith("n1", kMiB);
  SessionId c = Client();
  svc().Tick();
  uint64_t gen = Put(c, "k", 4000);
  clock_.AdvanceMs(5'000);
  svc().Tick();
  auto g = Get(c, "k");
  ASSERT_EQ(Code(g.status), absl::StatusCode::kOk);
  EXPECT_EQ(g.generation, gen);
  EXPECT_GT(svc().GetStats().used, 0u);
}

TEST_F(ObjectStoreTest, DeadlineOfOldGenerationDoesNotTouchANewerPut) {
  opts_.put_start_timeout_ms = 1'000;
  NodeWith("n1", kMiB);
  SessionId c = Client();
  svc().Tick();
  auto old_put = PutStart(c, "k", 100);
  ASSERT_EQ(Code(PutRevoke(c, "k", old_put.generation)), absl::StatusCode::kOk);
  clock_.AdvanceMs(500);
  auto fresh = PutStart(c, "k", 100);
  ASSERT_EQ(Code(fresh.status), absl::StatusCode::kOk);
  clock_.AdvanceMs(600);  // past the old deadline, before the new one
  svc().Tick();
  EXPECT_EQ(svc().GetStats().processing, 1u);
  EXPECT_EQ(Code(PutEnd(c, "k", fresh.generation)), absl::StatusCode::kOk);
}

// ---------------------------------------------------------------------------------------------
// Node death

TEST_F(ObjectStoreTest, NodeClosedUnmountsSegmentsAndDropsSoleReplicas) {
  SessionId n1 = NodeWith("n1", kMiB);
  SessionId n2 = NodeWith("n2", kMiB);
  SessionId c = Client();
  // Place single-replica objects until both nodes hold some.
  std::map<std::string, std::string> node_of;
  for (int i = 0; i < 10; ++i) {
    std::string k = absl::StrCat("k", i);
    auto ps = PutStart(c, k, 1000);
    ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
    node_of[k] = segment_node_[ps.replicas[0].segment_id];
    ASSERT_EQ(Code(PutEnd(c, k, ps.generation)), absl::StatusCode::kOk);
  }
  size_t on_n1 = 0;
  for (auto& [k, n] : node_of) on_n1 += n == "n1";
  ASSERT_GT(on_n1, 0u);
  ASSERT_LT(on_n1, node_of.size());
  // An in-flight put on n1 dies with it too.
  std::string pending_key;
  uint64_t pending_gen = 0;
  for (int i = 0; pending_key.empty(); ++i) {
    std::string k = absl::StrCat("p", i);
    auto ps = PutStart(c, k, 100);
    ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
    if (segment_node_[ps.replicas[0].segment_id] == "n1") {
      pending_key = k;
      pending_gen = ps.generation;
    } else {
      ASSERT_EQ(Code(PutRevoke(c, k, ps.generation)), absl::StatusCode::kOk);
    }
  }

  svc().SessionClosed(n1);
  EXPECT_EQ(svc().GetStats().segments, 1u);
  EXPECT_EQ(svc().GetStats().capacity, kMiB);
  for (auto& [k, n] : node_of) {
    auto g = Get(c, k);
    if (n == "n1") {
      EXPECT_EQ(Code(g.status), absl::StatusCode::kNotFound) << k;
    } else {
      ASSERT_EQ(Code(g.status), absl::StatusCode::kOk) << k;
      EXPECT_EQ(g.replicas.size(), 1u);
      GetEnd(c, k, g.generation);
    }
  }
  EXPECT_EQ(svc().GetStats().objects, node_of.size() - on_n1);
  EXPECT_EQ(Code(PutEnd(c, pending_key, pending_gen)), absl::StatusCode::kNotFound);
  for (const auto& s : svc().ListSegments()) EXPECT_EQ(s.node_id, "n2");

  // Everything left is removable and the survivor's accounting returns to zero.
  for (auto& [k, n] : node_of) {
    if (n != "n1") {
      EXPECT_EQ(Code(Remove(c, k)), absl::StatusCode::kOk);
    }
  }
  EXPECT_EQ(svc().GetStats().used, 0u);
  EXPECT_EQ(svc().GetStats().objects, 0u);
  svc().SessionClosed(n2);
  // No node left: retryable, and saying why.
  auto r = PutStart(c, "x", 10);
  EXPECT_EQ(Code(r.status), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(Has(r.status.message, "no node has mounted a segment yet")) << r.status.message;
}

TEST_F(ObjectStoreTest, NodeDeathLeavesTwoReplicaObjectReadableOnTheSurvivor) {
  uint64_t seg1 = 0, seg2 = 0;
  SessionId n1 = NodeWith("n1", kMiB, &seg1);
  NodeWith("n2", kMiB, &seg2);
  SessionId c = Client();
  uint64_t gen = Put(c, "k", 5000, 2);
  ASSERT_EQ(Get(c, "k").replicas.size(), 2u);
  GetEnd(c, "k", gen);

  svc().SessionClosed(n1);
  auto g = Get(c, "k");
  ASSERT_EQ(Code(g.status), absl::StatusCode::kOk) << g.status.message;
  EXPECT_EQ(g.generation, gen);
  ASSERT_EQ(g.replicas.size(), 1u);
  EXPECT_EQ(g.replicas[0].segment_id, seg2);
  ExpectInside(g.replicas, 5000);
  GetEnd(c, "k", gen);
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().used, 0u);
}

// ---------------------------------------------------------------------------------------------
// Leases

TEST_F(ObjectStoreTest, LeaseBlocksRemoveUntilGetEnd) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  uint64_t gen = Put(c, "k", 100);
  auto g = Get(c, "k");
  ASSERT_EQ(Code(g.status), absl::StatusCode::kOk);
  auto rm = Remove(c, "k");
  EXPECT_EQ(Code(rm), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Has(rm.message, "lease")) << rm.message;
  EXPECT_EQ(rm.reason, ErrorReason::kHasLease) << rm.message;
  EXPECT_EQ(Code(GetEnd(c, "k", gen + 1)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Code(GetEnd(c, "k", gen)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().used, 0u);
}

TEST_F(ObjectStoreTest, ForceRemovesALeasedObjectButNotAPutInProgress) {
  NodeWith("n1", kMiB);
  SessionId c = Client();
  uint64_t gen = Put(c, "k", 100);
  ASSERT_EQ(Code(Get(c, "k").status), absl::StatusCode::kOk);  // the read lease is held
  auto rm = Remove(c, "k");
  EXPECT_EQ(Code(rm), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rm.reason, ErrorReason::kHasLease) << rm.message;
  EXPECT_EQ(Code(Remove(c, "k", /*force=*/true)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Get(c, "k").status), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(GetEnd(c, "k", gen)), absl::StatusCode::kNotFound);  // the late reader: harmless
  EXPECT_EQ(svc().GetStats().used, 0u);
  // A put in progress is refused even with force (its writer is still writing).
  auto ps = PutStart(c, "p", 100);
  ASSERT_EQ(Code(ps.status), absl::StatusCode::kOk);
  auto rp = Remove(c, "p", /*force=*/true);
  EXPECT_EQ(Code(rp), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(rp.reason, ErrorReason::kHasLease);
  EXPECT_EQ(Code(Remove(c, "missing", /*force=*/true)), absl::StatusCode::kNotFound);
}

TEST_F(ObjectStoreTest, LeaseWithTwoReadersNeedsBothGetEnds) {
  NodeWith("n1", kMiB);
  SessionId r1 = Client();
  SessionId r2 = Client();
  uint64_t gen = Put(r1, "k", 100);
  ASSERT_EQ(Code(Get(r1, "k").status), absl::StatusCode::kOk);
  ASSERT_EQ(Code(Get(r2, "k").status), absl::StatusCode::kOk);
  EXPECT_EQ(Code(GetEnd(r1, "k", gen)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Remove(r1, "k")), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Code(GetEnd(r2, "k", gen)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Remove(r1, "k")), absl::StatusCode::kOk);
}

TEST_F(ObjectStoreTest, LeaseRunsOutWithoutGetEnd) {
  opts_.kv_lease_ttl_ms = 5'000;
  NodeWith("n1", kMiB);
  SessionId c = Client();
  Put(c, "k", 100);
  ASSERT_EQ(Code(Get(c, "k").status), absl::StatusCode::kOk);
  clock_.AdvanceMs(4'999);
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kFailedPrecondition);
  clock_.AdvanceMs(2);
  EXPECT_EQ(Code(Remove(c, "k")), absl::StatusCode::kOk);
  EXPECT_EQ(svc().GetStats().used, 0u);
}

// A Get after every lease ran out starts the count afresh; the reader whose lease ran out, ending
// late, must not end the lease of the reader who came after it (GetEnd echoes its own lease's
// token, and a lease past its end is not counted off).
TEST_F(ObjectStoreTest, LateGetEndDoesNotCancelAnotherReadersLease) {
  opts_.kv_lease_ttl_ms = 5'000;
  NodeWith("n1", kMiB);
  SessionId slow = Client();
  SessionId later = Client();
  uint64_t gen = Put(slow, "k", 100);
  ASSERT_EQ(Code(Get(slow, "k").status), absl::StatusCode::kOk);
  clock_.AdvanceMs(6'000);  // slow's lease ran out
  ASSERT_EQ(Code(Get(later, "k").status), absl::StatusCode::kOk);
  ASSERT_EQ(Code(GetEnd(slow, "k", gen)), absl::StatusCode::kOk);  // slow ends late
  // later's lease (until +5 s) still holds, against Remove and eviction alike.
  auto rm = Remove(slow, "k");
  EXPECT_EQ(Code(rm), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rm.reason, ErrorReason::kHasLease);
  clock_.AdvanceMs(1'000);
  EXPECT_EQ(Code(Remove(slow, "k")), absl::StatusCode::kFailedPrecondition);
  // later's own GetEnd ends it at once.
  ASSERT_EQ(Code(GetEnd(later, "k", gen)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Remove(slow, "k")), absl::StatusCode::kOk);
}

// The same when the late reader's lease ran out while the other reader's was held: the late end
// changes nothing, the live reader's end frees the object.
TEST_F(ObjectStoreTest, LateGetEndAmongOverlappingLeases) {
  opts_.kv_lease_ttl_ms = 5'000;
  NodeWith("n1", kMiB);
  SessionId a = Client();
  SessionId b = Client();
  uint64_t gen = Put(a, "k", 100);
  ASSERT_EQ(Code(Get(a, "k").status), absl::StatusCode::kOk);  // until 5 s
  clock_.AdvanceMs(3'000);
  ASSERT_EQ(Code(Get(b, "k").status), absl::StatusCode::kOk);  // until 8 s
  clock_.AdvanceMs(3'000);                                     // a's ran out, b's holds
  ASSERT_EQ(Code(GetEnd(a, "k", gen)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Remove(a, "k")), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(Code(GetEnd(b, "k", gen)), absl::StatusCode::kOk);
  // a's lease was never counted off: the object is free once b's end (8 s) has passed.
  clock_.AdvanceMs(2'001);
  EXPECT_EQ(Code(Remove(a, "k")), absl::StatusCode::kOk);
}

// ---------------------------------------------------------------------------------------------
// Tenants

TEST_F(ObjectStoreTest, TenantsHaveSeparateKeySpaces) {
  NodeWith("n1", kMiB);
  SessionId a = Client("alpha");
  SessionId b = Client("beta");
  uint64_t ga = Put(a, "shared", 100);
  uint64_t gb = Put(b, "shared", 200);
  ASSERT_NE(ga, gb);
  auto ra = Get(a, "shared");
  auto rb = Get(b, "shared");
  EXPECT_EQ(ra.generation, ga);
  EXPECT_EQ(ra.size, 100u);
  EXPECT_EQ(rb.generation, gb);
  EXPECT_EQ(rb.size, 200u);
  // B cannot end A's lease by naming A's generation.
  EXPECT_EQ(Code(GetEnd(b, "shared", ga)), absl::StatusCode::kNotFound);
  ASSERT_EQ(Code(GetEnd(a, "shared", ga)), absl::StatusCode::kOk);
  ASSERT_EQ(Code(GetEnd(b, "shared", gb)), absl::StatusCode::kOk);

  ASSERT_EQ(Code(Remove(a, "shared")), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Get(a, "shared").status), absl::StatusCode::kNotFound);
  auto rb2 = Get(b, "shared");
  ASSERT_EQ(Code(rb2.status), absl::StatusCode::kOk);
  EXPECT_EQ(rb2.generation, gb);

  // B cannot commit or revoke A's put in progress, even knowing its generation.
  auto pa = PutStart(a, "pending", 100);
  ASSERT_EQ(Code(pa.status), absl::StatusCode::kOk);
  EXPECT_EQ(Code(PutEnd(b, "pending", pa.generation)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(PutRevoke(b, "pending", pa.generation)), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(Exist(b, "pending")), absl::StatusCode::kNotFound);
  EXPECT_EQ(Code(PutEnd(a, "pending", pa.generation)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Exist(b, "pending")), absl::StatusCode::kNotFound);
}

TEST_F(ObjectStoreTest, ListIsTenantScopedSortedPrefixedAndPaged) {
  NodeWith("n1", kMiB);
  SessionId a = Client("alpha");
  SessionId b = Client("beta");
  SessionId ab = Client("alphabet");  // a tenant whose name extends another's
  for (const char* k : {"p/3", "p/1", "q/1", "p/2", "p/10"}) Put(a, k, 10);
  for (const char* k : {"p/1", "p/zz"}) Put(b, k, 10);
  Put(ab, "p/0", 10);
  ASSERT_EQ(Code(PutStart(a, "p/4", 10).status), absl::StatusCode::kOk);  // in progress

  bool more = true;
  EXPECT_EQ(ListKeys(a, "", "", 1000, &more),
            (std::vector<std::string>{"p/1", "p/10", "p/2", "p/3", "p/4", "q/1"}));
  EXPECT_FALSE(more);
  EXPECT_EQ(ListKeys(b), (std::vector<std::string>{"p/1", "p/zz"}));
  EXPECT_EQ(ListKeys(ab), (std::vector<std::string>{"p/0"}));
  EXPECT_EQ(ListKeys(a, "q"), (std::vector<std::string>{"q/1"}));
  EXPECT_TRUE(ListKeys(a, "z").empty());

  // Paging over the prefix "p/".
  EXPECT_EQ(ListKeys(a, "p/", "", 2, &more), (std::vector<std::string>{"p/1", "p/10"}));
  EXPECT_TRUE(more);
  EXPECT_EQ(ListKeys(a, "p/", "p/10", 2, &more), (std::vector<std::string>{"p/2", "p/3"}));
  EXPECT_TRUE(more);
  EXPECT_EQ(ListKeys(a, "p/", "p/3", 2, &more), (std::vector<std::string>{"p/4"}));
  EXPECT_FALSE(more);
  // Exactly `limit` left: no more.
  EXPECT_EQ(ListKeys(a, "p/", "p/2", 2, &more), (std::vector<std::string>{"p/3", "p/4"}));
  EXPECT_FALSE(more);
  // start_after need not be an existing key.
  EXPECT_EQ(ListKeys(a, "", "p/25", 10, &more), (std::vector<std::string>{"p/3", "p/4", "q/1"}));

  // Object details: state and replica count.
  proto::ListRequest r;
  r.prefix = "p/";
  auto rep = svc().List(a, r);
  ASSERT_EQ(rep.objects.size(), 5u);
  EXPECT_EQ(rep.objects[4].key, "p/4");
  EXPECT_EQ(rep.objects[4].state, proto::ObjectState::kProcessing);
  EXPECT_EQ(rep.objects[0].state, proto::ObjectState::kComplete);
  EXPECT_EQ(rep.objects[0].size, 10u);
  EXPECT_EQ(rep.objects[0].replica_count, 1u);
}

// A list keeps only the `limit` smallest keys while it walks the shards (memory for what it
// returns, not for every key of the tenant): whatever the shard order, the page is the sorted
// head, and `more` says whether anything was left out.
TEST_F(ObjectStoreTest, ListReturnsTheSmallestKeysFromEveryShardWithinTheLimit) {
  NodeWith("n1", kMiB);
  SessionId a = Client("alpha");
  std::vector<std::string> keys;
  for (int i = 0; i < 150; ++i) keys.push_back(absl::StrCat("k/", (i * 37) % 150 + 1000));
  for (const std::string& k : keys) Put(a, k, 8);
  std::sort(keys.begin(), keys.end());
  for (uint32_t limit : {1u, 2u, 7u, 149u, 150u, 151u, 1000u}) {
    bool more = false;
    const size_t n = std::min<size_t>(limit, keys.size());
    EXPECT_EQ(ListKeys(a, "k/", "", limit, &more),
              std::vector<std::string>(keys.begin(), keys.begin() + n))
        << limit;
    EXPECT_EQ(more, limit < keys.size()) << limit;
  }
  bool more = false;
  EXPECT_EQ(ListKeys(a, "k/", keys[100], 10, &more),
            std::vector<std::string>(keys.begin() + 101, keys.begin() + 111));
  EXPECT_TRUE(more);
}

}  // namespace
}  // namespace granary::master
