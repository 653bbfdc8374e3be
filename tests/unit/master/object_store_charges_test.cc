// What a tenant is charged in the master (docs/architecture.md section 5), and when it is given
// back: the object store's paths (master/object_store.h) through the MasterService facade,
// in-process with a FakeClock (quota_fixture.h). Put, revoke, expiry, a session's end, remove
// and node loss; effective quotas that follow capacity; and exact accounting under concurrent
// random operations. Admission at the quota is eviction_quota_test's.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "master/master_service.h"
#include "master/tenant/quota_ledger.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "tests/unit/master/quota_fixture.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using proto::WireStatus;
using tenant::TenantSnapshot;
using test_calls::Code;

using ObjectStoreChargesTest = QuotaFixture;

// ---------------------------------------------------------------------------------------------
// What is charged, and when it is given back

TEST_F(ObjectStoreChargesTest, PutStartChargesAllocatedBytesTimesReplicasInFlight) {
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

TEST_F(ObjectStoreChargesTest, PutRevokeRefundsTheCharge) {
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

TEST_F(ObjectStoreChargesTest, ExpiredPutIsRefundedAtItsDeadline) {
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

TEST_F(ObjectStoreChargesTest, SessionClosedRefundsInFlightAndKeepsCommitted) {
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

TEST_F(ObjectStoreChargesTest, SilentSessionExpiryRefundsItsInFlightPuts) {
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

TEST_F(ObjectStoreChargesTest, RemoveReleasesTheCharge) {
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

TEST_F(ObjectStoreChargesTest, FailedAllocationRefundsTheCharge) {
  NodeWith("n1", 4 * kMiB);  // one node: two replicas cannot be placed
  SetPolicy({{"tenant-a", 4 * kMiB}});
  SessionId c = Client("tenant-a");
  auto ps = PutStart(c, "k", 1000, 2);
  EXPECT_EQ(Code(ps.status), absl::StatusCode::kResourceExhausted) << ps.status.message;
  EXPECT_NE(ps.status.reason, ErrorReason::kQuotaExceeded) << ps.status.message;
  EXPECT_EQ(Snap("tenant-a").charged_bytes, 0u);
  EXPECT_EQ(Snap("tenant-a").inflight_bytes, 0u);
}

TEST_F(ObjectStoreChargesTest, PutOfAnExistingKeyChargesNothing) {
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

TEST_F(ObjectStoreChargesTest, NodeLossReleasesCommittedAndRefundsInFlightBytesOnIt) {
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

TEST_F(ObjectStoreChargesTest, LosingOneOfTwoReplicasReleasesHalfAndKeepsTheEntry) {
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

TEST_F(ObjectStoreChargesTest, RevokeAfterLosingOneReplicaRefundsTheRest) {
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
// Effective quota follows capacity

TEST_F(ObjectStoreChargesTest, EffectiveQuotaIsRecomputedOnMountAndOnNodeLoss) {
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

TEST_F(ObjectStoreChargesTest, NodeLossThatShrinksTheQuotaBelowTheChargeMakesTheTenantOverQuota) {
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

TEST_F(ObjectStoreChargesTest, NodeLossReleasesTheLostHalfOfTwoReplicaObjects) {
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

TEST_F(ObjectStoreChargesTest, ConcurrentRandomOperationsKeepChargesWithinQuotaAndExact) {
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
    if (Code(s.Hello(sid, h).status) != absl::StatusCode::kOk) ++failures;
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
            if (Code(rep.status) != absl::StatusCode::kOk ||
                rep.results.size() != r.entries.size()) {
              ++failures;
              break;
            }
            for (size_t j = 0; j < rep.results.size(); ++j) {
              const auto& res = rep.results[j];
              if (Code(res.status) == absl::StatusCode::kOk) {
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
            if (rep.results.size() == 1 && Code(rep.results[0].status) == absl::StatusCode::kOk) {
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
    ASSERT_EQ(Code(all.status), absl::StatusCode::kOk) << all.status.message;
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
