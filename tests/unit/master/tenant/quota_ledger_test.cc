// QuotaLedger (master/tenant/quota_ledger.h) on one thread: charges, commits, refunds and
// releases; strict and open modes and policy changes; effective quotas shared out of capacity;
// counters and snapshots; and the CHECKs on a broken caller contract. Concurrent callers are
// quota_ledger_concurrency_test's.

#include "master/tenant/quota_ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "tests/unit/master/tenant/quota_ledger_helpers.h"

namespace granary::master::tenant {
namespace {

// ----------------------------------------------------------------------------------------------
// Charge / Commit / Refund / Release

TEST(QuotaLedger, ChargeWithinQuotaSucceeds) {
  QuotaLedger ledger(/*enforce=*/true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  EXPECT_TRUE(ledger.Charge("a", 60).ok());
  EXPECT_TRUE(ledger.Charge("a", 40).ok());  // exactly up to the quota
  EXPECT_TRUE(ledger.Charge("a", 0).ok());
  TenantSnapshot s = Snap(ledger, "a");
  EXPECT_EQ(s.charged_bytes, 100u);
  EXPECT_EQ(s.inflight_bytes, 100u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.requested_quota_bytes, 100u);
  EXPECT_EQ(s.effective_quota_bytes, 100u);
  EXPECT_TRUE(s.has_explicit_policy);
  EXPECT_FALSE(s.over_quota);
  EXPECT_FALSE(s.admission_closed);
}

TEST(QuotaLedger, ChargePastQuotaFailsWithQuotaExceeded) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 60).ok());
  absl::Status st = ledger.Charge("a", 41);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(ErrorReasonOf(st) == ErrorReason::kQuotaExceeded) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "'a'")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "charged 60 bytes")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "requested 41 bytes")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "effective quota 100 bytes")) << st;
  EXPECT_EQ(Snap(ledger, "a").charged_bytes, 60u);  // a refusal charges nothing
  EXPECT_EQ(ledger.Charge("a", kBig).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ledger.Charge("a", std::numeric_limits<uint64_t>::max()).code(),
            absl::StatusCode::kResourceExhausted);  // no wrap-around
  EXPECT_TRUE(ledger.Charge("a", 40).ok());
}

TEST(QuotaLedger, RefundReturnsInflightBytes) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 70).ok());
  ledger.Refund("a", 70);
  TenantSnapshot s = Snap(ledger, "a");
  EXPECT_EQ(s.charged_bytes, 0u);
  EXPECT_EQ(s.inflight_bytes, 0u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_TRUE(ledger.Charge("a", 100).ok());  // the room is back
}

TEST(QuotaLedger, CommitMovesInflightToCommittedAndCountsEntry) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 30).ok());
  ASSERT_TRUE(ledger.Charge("a", 20).ok());
  ledger.Commit("a", 30);
  TenantSnapshot s = Snap(ledger, "a");
  EXPECT_EQ(s.charged_bytes, 50u);  // committed bytes stay charged
  EXPECT_EQ(s.inflight_bytes, 20u);
  EXPECT_EQ(s.entries, 1u);
  ledger.Commit("a", 20);
  s = Snap(ledger, "a");
  EXPECT_EQ(s.charged_bytes, 50u);
  EXPECT_EQ(s.inflight_bytes, 0u);
  EXPECT_EQ(s.entries, 2u);
}

TEST(QuotaLedger, PartialCommitRefundsTheUnusedPart) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 90).ok());
  ledger.Commit("a", 60);
  ledger.Refund("a", 30);
  TenantSnapshot s = Snap(ledger, "a");
  EXPECT_EQ(s.charged_bytes, 60u);
  EXPECT_EQ(s.inflight_bytes, 0u);
  EXPECT_EQ(s.entries, 1u);
}

TEST(QuotaLedger, ReleaseFreesCommittedBytes) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 100).ok());
  ledger.Commit("a", 100);
  EXPECT_FALSE(ledger.Charge("a", 1).ok());
  ledger.Release("a", 100);
  TenantSnapshot s = Snap(ledger, "a");
  EXPECT_EQ(s.charged_bytes, 0u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_TRUE(ledger.Charge("a", 100).ok());
}

TEST(QuotaLedger, ReleaseBytesFreesALostReplicaButKeepsTheEntry) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 90).ok());  // three replicas of 30
  ledger.Commit("a", 90);
  ledger.ReleaseBytes("a", 30);  // one replica lost
  TenantSnapshot s = Snap(ledger, "a");
  EXPECT_EQ(s.charged_bytes, 60u);
  EXPECT_EQ(s.entries, 1u);
  ledger.Release("a", 60);  // then the object goes
  s = Snap(ledger, "a");
  EXPECT_EQ(s.charged_bytes, 0u);
  EXPECT_EQ(s.entries, 0u);
}

TEST(QuotaLedger, ReleaseEvictedFreesLikeReleaseAndCountsTheEviction) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 1000}, {"b", 1000}}), kBig);
  for (uint64_t bytes : {100u, 200u, 300u}) {
    ASSERT_TRUE(ledger.Charge("a", bytes).ok());
    ledger.Commit("a", bytes);
  }
  ASSERT_TRUE(ledger.Charge("b", 50).ok());
  ledger.Commit("b", 50);
  ledger.Release("a", 100);  // a remove: not an eviction
  ledger.ReleaseEvicted("a", 200);
  ledger.ReleaseEvicted("a", 300);
  TenantSnapshot a = Snap(ledger, "a");
  EXPECT_EQ(a.charged_bytes, 0u);
  EXPECT_EQ(a.entries, 0u);
  EXPECT_EQ(a.evicted_objects, 2u);
  EXPECT_EQ(a.evicted_bytes, 500u);
  TenantSnapshot b = Snap(ledger, "b");
  EXPECT_EQ(b.evicted_objects, 0u);
  EXPECT_EQ(b.evicted_bytes, 0u);
  // The counts survive a policy change that keeps the tenant.
  ledger.ApplyPolicy(MakePolicy({{"a", 2000}, {"b", 1000}}), kBig);
  EXPECT_EQ(Snap(ledger, "a").evicted_objects, 2u);
}

// ----------------------------------------------------------------------------------------------
// Modes and policy changes

TEST(QuotaLedger, StrictModeRejectsUnregisteredTenant) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  absl::Status st = ledger.Charge("x", 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(st.message(), "TENANT_NOT_REGISTERED: tenant 'x' has no quota policy");
  EXPECT_FALSE(ledger.Snapshot("x").has_value());  // a reject creates no account
  EXPECT_FALSE(ledger.Charge("default", 1).ok());  // `default` is not special
  EXPECT_EQ(ledger.SnapshotAll().size(), 1u);
}

TEST(QuotaLedger, NonStrictModeNeverRejects) {
  QuotaLedger ledger(/*enforce=*/false);
  EXPECT_FALSE(ledger.enforce());
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), /*capacity_bytes=*/50);
  EXPECT_TRUE(ledger.Charge("a", 1000).ok());  // past its quota and past capacity
  EXPECT_TRUE(ledger.Charge("x", kBig).ok());  // unknown: created on demand
  EXPECT_TRUE(ledger.Charge("x", kBig).ok());
  TenantSnapshot x = Snap(ledger, "x");
  EXPECT_EQ(x.charged_bytes, 2 * kBig);
  EXPECT_EQ(x.requested_quota_bytes, 0u);
  EXPECT_EQ(x.effective_quota_bytes, 0u);
  EXPECT_FALSE(x.has_explicit_policy);
  EXPECT_FALSE(x.over_quota);
  EXPECT_FALSE(x.admission_closed);
  TenantSnapshot a = Snap(ledger, "a");
  EXPECT_TRUE(a.has_explicit_policy);
  EXPECT_EQ(a.effective_quota_bytes, 50u);
  EXPECT_FALSE(a.over_quota);
  EXPECT_FALSE(ledger.IsOverQuota("a"));
  // Dropping a tenant that holds bytes does not close it without enforcement.
  ledger.ApplyPolicy(MakePolicy({}), 50);
  a = Snap(ledger, "a");
  EXPECT_FALSE(a.admission_closed);
  EXPECT_FALSE(a.has_explicit_policy);
  EXPECT_TRUE(ledger.Charge("a", 1).ok());
  // On-demand accounts that hold nothing are dropped at the next policy.
  ledger.Refund("x", 2 * kBig);
  ledger.ApplyPolicy(MakePolicy({}), 50);
  EXPECT_FALSE(ledger.Snapshot("x").has_value());
  EXPECT_TRUE(ledger.Snapshot("a").has_value());
  EXPECT_EQ(Snap(ledger, "a").rejects_quota + Snap(ledger, "a").rejects_closed, 0u);
}

TEST(QuotaLedger, DroppedTenantWithDataIsAdmissionClosed) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}, {"b", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 30).ok());
  ledger.Commit("a", 30);
  ASSERT_TRUE(ledger.Charge("a", 20).ok());  // still in flight when the policy changes
  ledger.ApplyPolicy(MakePolicy({{"b", 100}}), kBig);

  TenantSnapshot s = Snap(ledger, "a");
  EXPECT_TRUE(s.admission_closed);
  EXPECT_FALSE(s.has_explicit_policy);
  EXPECT_EQ(s.requested_quota_bytes, 0u);
  EXPECT_EQ(s.effective_quota_bytes, 0u);
  EXPECT_TRUE(s.over_quota);  // evicted first
  EXPECT_EQ(s.charged_bytes, 50u);

  absl::Status st = ledger.Charge("a", 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(ErrorReasonOf(st) == ErrorReason::kAdmissionClosed) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "'a'")) << st;

  // What was in flight may still commit; everything can be released.
  ledger.Commit("a", 20);
  ledger.Release("a", 30);
  s = Snap(ledger, "a");
  EXPECT_EQ(s.charged_bytes, 20u);
  EXPECT_EQ(s.entries, 1u);
  // The last Release of a closed tenant removes its account at once.
  ledger.Release("a", 20);
  EXPECT_FALSE(ledger.Snapshot("a").has_value());
  EXPECT_EQ(ledger.Charge("a", 1).message(),
            "TENANT_NOT_REGISTERED: tenant 'a' has no quota policy");
}

TEST(QuotaLedger, ClosedTenantDisappearsWhenItsLastInflightBytesAreRefunded) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 10).ok());
  ledger.ApplyPolicy(MakePolicy({}), kBig);
  ASSERT_TRUE(Snap(ledger, "a").admission_closed);
  ledger.Refund("a", 10);
  EXPECT_FALSE(ledger.Snapshot("a").has_value());
}

TEST(QuotaLedger, DroppedTenantWithoutDataDisappears) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}, {"b", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 10).ok());
  ledger.Refund("a", 10);  // held something once, holds nothing now
  ledger.ApplyPolicy(MakePolicy({{"b", 100}}), kBig);
  EXPECT_FALSE(ledger.Snapshot("a").has_value());
  EXPECT_EQ(ledger.SnapshotAll().size(), 1u);
  EXPECT_EQ(ledger.requested_sum(), 100u);
}

TEST(QuotaLedger, DroppedTenantAddedBackIsOpenAgain) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 40).ok());
  ledger.Commit("a", 40);
  ledger.ApplyPolicy(MakePolicy({}), kBig);
  ASSERT_TRUE(Snap(ledger, "a").admission_closed);
  ledger.ApplyPolicy(MakePolicy({{"a", 50}}), kBig);
  TenantSnapshot s = Snap(ledger, "a");
  EXPECT_FALSE(s.admission_closed);
  EXPECT_TRUE(s.has_explicit_policy);
  EXPECT_EQ(s.charged_bytes, 40u);  // its bytes were kept
  EXPECT_TRUE(ledger.Charge("a", 10).ok());
  EXPECT_FALSE(ledger.Charge("a", 1).ok());
}

TEST(QuotaLedger, LoweredQuotaMakesTenantOverQuotaAndRejects) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(ledger.Charge("a", 20).ok());
    ledger.Commit("a", 20);
  }
  ledger.ApplyPolicy(MakePolicy({{"a", 50}}), kBig);
  TenantSnapshot s = Snap(ledger, "a");
  EXPECT_EQ(s.charged_bytes, 80u);
  EXPECT_EQ(s.effective_quota_bytes, 50u);
  EXPECT_TRUE(s.over_quota);
  EXPECT_TRUE(ledger.IsOverQuota("a"));

  absl::Status st = ledger.Charge("a", 1);
  EXPECT_TRUE(ErrorReasonOf(st) == ErrorReason::kQuotaExceeded) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "over quota")) << st;
  EXPECT_FALSE(ledger.Charge("a", 0).ok());  // refused whatever the size while over

  ledger.Release("a", 20);  // 60: still over
  EXPECT_FALSE(ledger.Charge("a", 0).ok());
  ledger.Release("a", 20);  // 40: under again
  EXPECT_FALSE(ledger.IsOverQuota("a"));
  EXPECT_FALSE(ledger.Charge("a", 11).ok());
  EXPECT_TRUE(ledger.Charge("a", 10).ok());
  EXPECT_EQ(Snap(ledger, "a").rejects_quota, 4u);
}

// ----------------------------------------------------------------------------------------------
// Effective quotas

TEST(QuotaLedger, EffectiveQuotaEqualsRequestedWhenRequestsFit) {
  std::map<std::string, uint64_t> req = {{"a", 3}, {"b", 3}, {"c", 3}};
  EXPECT_EQ(QuotaLedger::ComputeEffective(req, 10), req);
  EXPECT_EQ(QuotaLedger::ComputeEffective(req, 9), req);
  EXPECT_TRUE(QuotaLedger::ComputeEffective({}, 0).empty());
}

TEST(QuotaLedger, EffectiveQuotaScalesDownByLargestRemainderTiesByName) {
  using M = std::map<std::string, uint64_t>;
  // 15 into 10: 3.33 each; the one leftover byte goes to the alphabetically first.
  EXPECT_EQ(QuotaLedger::ComputeEffective({{"a", 5}, {"b", 5}, {"c", 5}}, 10),
            (M{{"a", 4}, {"b", 3}, {"c", 3}}));
  EXPECT_EQ(QuotaLedger::ComputeEffective({{"zz", 5}, {"b", 5}, {"m", 5}}, 10),
            (M{{"b", 4}, {"m", 3}, {"zz", 3}}));
  // 0.5, 1.0, 3.5 -> 0, 1, 3 + one byte: a and c tie at .5, a wins by name.
  EXPECT_EQ(QuotaLedger::ComputeEffective({{"a", 1}, {"b", 2}, {"c", 7}}, 5),
            (M{{"a", 1}, {"b", 1}, {"c", 3}}));
  // 0.6, 2.4 -> the larger remainder wins even against a smaller request.
  EXPECT_EQ(QuotaLedger::ComputeEffective({{"a", 1}, {"b", 4}}, 3), (M{{"a", 1}, {"b", 2}}));
  // 1.2, 1.8 -> b has the larger remainder although a sorts first.
  EXPECT_EQ(QuotaLedger::ComputeEffective({{"a", 2}, {"b", 3}}, 3), (M{{"a", 1}, {"b", 2}}));
  // Exact proportions, no leftover.
  EXPECT_EQ(QuotaLedger::ComputeEffective({{"a", 10}, {"b", 30}}, 32), (M{{"a", 8}, {"b", 24}}));
  EXPECT_EQ(QuotaLedger::ComputeEffective({{"x", 1}, {"y", 1}}, 1), (M{{"x", 1}, {"y", 0}}));
  // No capacity, nothing effective.
  EXPECT_EQ(QuotaLedger::ComputeEffective({{"a", 5}, {"b", 7}}, 0), (M{{"a", 0}, {"b", 0}}));
  // Products past 2^64 need the 128-bit path: (2^63-1) * 3 > 2^64 - 1 = capacity.
  const uint64_t q = (uint64_t{1} << 63) - 1;
  const uint64_t cap = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(QuotaLedger::ComputeEffective({{"a", q}, {"b", q}, {"c", q}}, cap),
            (M{{"a", cap / 3}, {"b", cap / 3}, {"c", cap / 3}}));
  EXPECT_EQ(QuotaLedger::ComputeEffective({{"a", q}, {"b", q}}, q),
            (M{{"a", q / 2 + 1}, {"b", q / 2}}));
}

TEST(QuotaLedger, EffectiveQuotaScaledDownSumsToCapacityAndNeverExceedsRequest) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::map<std::string, uint64_t> req;
    int n = 1 + static_cast<int>(rng() % 8);
    unsigned __int128 sum = 0;
    for (int i = 0; i < n; ++i) {
      uint64_t bytes = round % 2 == 0 ? 1 + rng() % 1000 : 1 + (rng() >> 1);
      req[absl::StrCat("t", rng() % 100)] = bytes;
    }
    for (const auto& [name, bytes] : req) sum += bytes;
    // Any capacity below the sum, so the requests never fit.
    const unsigned __int128 max64 = std::numeric_limits<uint64_t>::max();
    uint64_t cap = sum > max64 ? rng() : rng() % static_cast<uint64_t>(sum);
    std::map<std::string, uint64_t> eff = QuotaLedger::ComputeEffective(req, cap);
    ASSERT_EQ(eff.size(), req.size());
    // Shares are of the requests clamped to the capacity.
    unsigned __int128 clamped_sum = 0;
    for (const auto& [name, bytes] : req) clamped_sum += std::min(bytes, cap);
    unsigned __int128 total = 0;
    for (const auto& [name, bytes] : eff) {
      ASSERT_LE(bytes, req[name]);
      ASSERT_LE(bytes, cap);
      // Within one byte of the exact share (all of the clamped request when they fit).
      const uint64_t clamped = std::min(req[name], cap);
      unsigned __int128 exact_floor =
          clamped_sum <= cap ? clamped
                             : static_cast<unsigned __int128>(clamped) * cap / clamped_sum;
      ASSERT_TRUE(bytes == exact_floor || bytes == exact_floor + 1) << name;
      total += bytes;
    }
    ASSERT_TRUE(total == cap) << "round " << round;
  }
}

TEST(QuotaLedger, EffectiveRecomputedOnCapacityChange) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 600}, {"b", 400}}), 2000);
  EXPECT_EQ(ledger.capacity(), 2000u);
  EXPECT_EQ(ledger.requested_sum(), 1000u);
  EXPECT_EQ(Snap(ledger, "a").effective_quota_bytes, 600u);
  EXPECT_EQ(Snap(ledger, "b").effective_quota_bytes, 400u);

  ledger.SetCapacity(800);
  EXPECT_EQ(ledger.capacity(), 800u);
  EXPECT_EQ(ledger.requested_sum(), 1000u);
  EXPECT_EQ(Snap(ledger, "a").effective_quota_bytes, 480u);
  EXPECT_EQ(Snap(ledger, "b").effective_quota_bytes, 320u);
  EXPECT_EQ(Snap(ledger, "a").requested_quota_bytes, 600u);
  EXPECT_TRUE(ledger.Charge("a", 300).ok());
  EXPECT_TRUE(ledger.Charge("a", 180).ok());
  EXPECT_FALSE(ledger.Charge("a", 1).ok());

  // a's 600 is above a capacity of 500: it counts as 500 (500:400, not 600:400).
  ledger.SetCapacity(500);
  EXPECT_EQ(Snap(ledger, "a").effective_quota_bytes, 278u);
  EXPECT_EQ(Snap(ledger, "b").effective_quota_bytes, 222u);
  EXPECT_EQ(Snap(ledger, "a").requested_quota_bytes, 600u);

  ledger.SetCapacity(250);  // a shrinks under its charge: over quota (both count as 250)
  EXPECT_EQ(Snap(ledger, "a").effective_quota_bytes, 125u);
  EXPECT_EQ(Snap(ledger, "b").effective_quota_bytes, 125u);
  EXPECT_TRUE(ledger.IsOverQuota("a"));

  ledger.SetCapacity(0);
  EXPECT_EQ(Snap(ledger, "b").effective_quota_bytes, 0u);
  EXPECT_FALSE(ledger.Charge("b", 1).ok());

  ledger.SetCapacity(1u << 20);  // room again: back to requested
  EXPECT_EQ(Snap(ledger, "a").effective_quota_bytes, 600u);
  EXPECT_FALSE(ledger.IsOverQuota("a"));
  EXPECT_TRUE(ledger.Charge("b", 400).ok());
}

// Two tenants asking for 2^63-1 bytes (accepted: a typo such as "8EB") do not scale a third
// tenant's effective quota down to 0: each request counts as the capacity, so the third keeps
// about a third of its request, and the sum (past 2^64) does not overflow.
TEST(QuotaLedger, RequestsAboveTheCapacityCountAsTheCapacityAndStarveNobody) {
  using M = std::map<std::string, uint64_t>;
  const uint64_t q = (uint64_t{1} << 63) - 1;
  const uint64_t cap = uint64_t{1} << 30;  // 1 GiB mounted
  const uint64_t small = uint64_t{1} << 20;
  M eff = QuotaLedger::ComputeEffective({{"huge1", q}, {"huge2", q}, {"small", small}}, cap);
  EXPECT_GT(eff["small"], small / 3);
  EXPECT_LE(eff["small"], small);
  EXPECT_EQ(eff["huge1"] + eff["huge2"] + eff["small"], cap);
  // One huge request alone with a small one: the small one keeps half of its request at least.
  eff = QuotaLedger::ComputeEffective({{"huge", q}, {"small", small}}, cap);
  EXPECT_GE(eff["small"], small / 2);
  // Alone, the request is the capacity.
  EXPECT_EQ(QuotaLedger::ComputeEffective({{"huge", q}}, cap), (M{{"huge", cap}}));

  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"huge1", q}, {"huge2", q}, {"small", small}}), cap);
  EXPECT_EQ(ledger.requested_sum(), std::numeric_limits<uint64_t>::max());  // saturates
  EXPECT_EQ(Snap(ledger, "huge1").requested_quota_bytes, q);                // shown as asked
  EXPECT_GT(Snap(ledger, "small").effective_quota_bytes, small / 3);
  EXPECT_TRUE(ledger.Charge("small", small / 4).ok());
}

TEST(QuotaLedger, RequestedSumSaturates) {
  QuotaLedger ledger(true);
  const uint64_t q = (uint64_t{1} << 63) - 1;
  ledger.ApplyPolicy(MakePolicy({{"a", q}, {"b", q}, {"c", q}}), kBig);
  EXPECT_EQ(ledger.requested_sum(), std::numeric_limits<uint64_t>::max());
}

// ----------------------------------------------------------------------------------------------
// Counters and snapshots

TEST(QuotaLedger, RejectCountersByReason) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 10}, {"b", 10}}), kBig);
  EXPECT_FALSE(ledger.Charge("a", 11).ok());
  EXPECT_FALSE(ledger.Charge("a", 11).ok());
  ASSERT_TRUE(ledger.Charge("b", 5).ok());
  ledger.Commit("b", 5);
  ledger.ApplyPolicy(MakePolicy({{"a", 10}}), kBig);  // b closed
  EXPECT_FALSE(ledger.Charge("b", 1).ok());
  EXPECT_FALSE(ledger.Charge("c", 1).ok());
  EXPECT_FALSE(ledger.Charge("c", 1).ok());
  EXPECT_FALSE(ledger.Charge("c", 1).ok());

  TenantSnapshot a = Snap(ledger, "a");
  EXPECT_EQ(a.rejects_quota, 2u);
  EXPECT_EQ(a.rejects_closed, 0u);
  EXPECT_EQ(a.rejects_unregistered, 0u);
  TenantSnapshot b = Snap(ledger, "b");
  EXPECT_EQ(b.rejects_quota, 0u);
  EXPECT_EQ(b.rejects_closed, 1u);
  EXPECT_EQ(ledger.rejects_unregistered_total(), 3u);
  // Rejects counted while `c` was unknown show once it is registered.
  ledger.ApplyPolicy(MakePolicy({{"a", 10}, {"c", 10}}), kBig);
  TenantSnapshot c = Snap(ledger, "c");
  EXPECT_EQ(c.rejects_unregistered, 3u);
  EXPECT_EQ(c.rejects_quota, 0u);
  EXPECT_EQ(c.rejects_closed, 0u);
}

TEST(QuotaLedger, UnregisteredRejectsKeepBoundedMemory) {
  QuotaLedger ledger(true);
  const size_t n = QuotaLedger::kMaxTrackedUnregistered + 10;
  for (size_t i = 0; i < n; ++i) EXPECT_FALSE(ledger.Charge(absl::StrCat("u", i), 1).ok());
  EXPECT_EQ(ledger.rejects_unregistered_total(), n);
  ledger.ApplyPolicy(MakePolicy({{"u0", 1}, {absl::StrCat("u", n - 1), 1}}), kBig);
  EXPECT_EQ(Snap(ledger, "u0").rejects_unregistered, 1u);
  EXPECT_EQ(Snap(ledger, absl::StrCat("u", n - 1)).rejects_unregistered, 0u);  // past the cap
}

TEST(QuotaLedger, SnapshotAllIsSortedAndShowsMaxEntries) {
  QuotaLedger ledger(true);
  Policy p = MakePolicy({{"m", 1}, {"b", 2}, {"z", 3}});
  p.tenants[0].max_entries = 7;  // "b"
  ledger.ApplyPolicy(p, kBig);
  std::vector<TenantSnapshot> all = ledger.SnapshotAll();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].tenant_id, "b");
  EXPECT_EQ(all[1].tenant_id, "m");
  EXPECT_EQ(all[2].tenant_id, "z");
  EXPECT_EQ(all[0].max_entries, std::optional<uint64_t>(7));
  EXPECT_EQ(all[1].max_entries, std::nullopt);
  EXPECT_FALSE(ledger.Snapshot("nobody").has_value());
  EXPECT_FALSE(ledger.IsOverQuota("nobody"));
}

TEST(QuotaLedger, ErrorMessagesEscapeTenantIds) {
  QuotaLedger ledger(true);
  absl::Status st = ledger.Charge(absl::string_view("x\ny", 3), 1);
  EXPECT_EQ(st.message(), "TENANT_NOT_REGISTERED: tenant 'x\\ny' has no quota policy");
}

// ----------------------------------------------------------------------------------------------
// Broken caller contract: CHECK failures

using QuotaLedgerDeathTest = ::testing::Test;

TEST_F(QuotaLedgerDeathTest, RefundOfMoreThanInFlightCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 10).ok());
  EXPECT_DEATH(ledger.Refund("a", 11), "CHECK failed");
}

TEST_F(QuotaLedgerDeathTest, CommitOfMoreThanInFlightCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 10).ok());
  EXPECT_DEATH(ledger.Commit("a", 11), "CHECK failed");
}

TEST_F(QuotaLedgerDeathTest, ReleaseBytesOfMoreThanChargedCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 10).ok());
  ledger.Commit("a", 10);
  EXPECT_DEATH(ledger.ReleaseBytes("a", 11), "CHECK failed");
}

TEST_F(QuotaLedgerDeathTest, ReleaseWithoutEntryOrOfUnknownTenantCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"a", 100}}), kBig);
  ASSERT_TRUE(ledger.Charge("a", 10).ok());
  EXPECT_DEATH(ledger.Release("a", 10), "CHECK failed");  // nothing committed yet
  EXPECT_DEATH(ledger.Release("nobody", 1), "CHECK failed");
}

}  // namespace
}  // namespace granary::master::tenant
