// QuotaLedger under concurrent callers (master/tenant/quota_ledger.h): random charges, commits,
// refunds and releases against what each worker knows it holds; charges racing at the quota; and
// policy and capacity changes while the workers run. Its ThreadSanitizer build checks the locking.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "master/tenant/quota_ledger.h"
#include "tests/unit/master/tenant/quota_ledger_helpers.h"

namespace granary::master::tenant {
namespace {

// ----------------------------------------------------------------------------------------------
// Concurrency

constexpr int kThreads = 8;
constexpr int kOpsPerThread = 20000;
const std::vector<std::string> kTenants = {"t0", "t1", "t2", "t3"};

// What the test itself knows a worker holds: committed entries per tenant.
struct Held {
  std::vector<std::vector<uint64_t>> entries = std::vector<std::vector<uint64_t>>(kTenants.size());
  uint64_t quota_rejects = 0;  // QUOTA_EXCEEDED seen, per all tenants
};

// Random charge / commit / refund / partial commit / release (whole entry or part of its bytes)
// of this worker's own entries:
// kOpsPerThread operations once `go` is set, and on while `more` is.
void Worker(QuotaLedger& ledger, uint64_t seed, Held& held, const std::atomic<bool>& go,
            const std::atomic<bool>& more) {
  while (!go.load()) std::this_thread::yield();
  std::mt19937_64 rng(seed);
  for (int op = 0; op < kOpsPerThread || more.load(std::memory_order_relaxed); ++op) {
    size_t t = rng() % kTenants.size();
    const std::string& tenant = kTenants[t];
    std::vector<uint64_t>& mine = held.entries[t];
    if (rng() % 100 < 55 || mine.empty()) {
      uint64_t bytes = 1 + rng() % 4096;
      absl::Status st = ledger.Charge(tenant, bytes);
      if (!st.ok()) {
        ASSERT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
        if (ErrorReasonOf(st) == ErrorReason::kQuotaExceeded) ++held.quota_rejects;
        continue;
      }
      switch (rng() % 3) {
        case 0:
          ledger.Commit(tenant, bytes);
          mine.push_back(bytes);
          break;
        case 1:
          ledger.Refund(tenant, bytes);
          break;
        default: {
          uint64_t part = bytes == 1 ? 1 : 1 + rng() % (bytes - 1);
          ledger.Commit(tenant, part);
          if (part < bytes) ledger.Refund(tenant, bytes - part);
          mine.push_back(part);
        }
      }
    } else {
      size_t i = rng() % mine.size();
      if (mine[i] > 1 && rng() % 4 == 0) {  // a replica lost: part of the bytes, same entry
        uint64_t part = 1 + rng() % (mine[i] - 1);
        ledger.ReleaseBytes(tenant, part);
        mine[i] -= part;
        continue;
      }
      ledger.Release(tenant, mine[i]);
      mine[i] = mine.back();
      mine.pop_back();
    }
  }
}

// After the workers: the ledger holds exactly what the workers say they hold.
void ExpectLedgerMatches(QuotaLedger& ledger, std::vector<Held>& held) {
  for (size_t t = 0; t < kTenants.size(); ++t) {
    uint64_t bytes = 0, entries = 0;
    for (const Held& h : held) {
      for (uint64_t b : h.entries[t]) bytes += b;
      entries += h.entries[t].size();
    }
    std::optional<TenantSnapshot> s = ledger.Snapshot(kTenants[t]);
    if (!s.has_value()) {
      EXPECT_EQ(bytes, 0u) << kTenants[t];
      continue;
    }
    EXPECT_EQ(s->charged_bytes, bytes) << kTenants[t];
    EXPECT_EQ(s->inflight_bytes, 0u) << kTenants[t];
    EXPECT_EQ(s->entries, entries) << kTenants[t];
  }
  // Releasing everything leaves nothing charged.
  for (Held& h : held) {
    for (size_t t = 0; t < kTenants.size(); ++t) {
      for (uint64_t b : h.entries[t]) ledger.Release(kTenants[t], b);
      h.entries[t].clear();
    }
  }
  for (const TenantSnapshot& s : ledger.SnapshotAll()) {
    EXPECT_EQ(s.charged_bytes, 0u) << s.tenant_id;
    EXPECT_EQ(s.entries, 0u) << s.tenant_id;
  }
}

TEST(QuotaLedgerConcurrency, ChargedNeverExceedsEffectiveUnderRandomOps) {
  QuotaLedger ledger(true);
  // Requests sum past capacity, so the effective quotas are scaled (and unequal).
  ledger.ApplyPolicy(
      MakePolicy({{"t0", 64 << 10}, {"t1", 96 << 10}, {"t2", 128 << 10}, {"t3", 200 << 10}}),
      /*capacity_bytes=*/300 << 10);
  std::map<std::string, uint64_t> effective;
  for (const TenantSnapshot& s : ledger.SnapshotAll())
    effective[s.tenant_id] = s.effective_quota_bytes;

  constexpr uint64_t kMinSamples = 2000;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> samples{0};
  std::atomic<bool> sampler_exited{false};  // also when an ASSERT in it fails
  std::thread sampler([&] {
    auto sample = [&] {
      while (!done.load()) {
        for (const TenantSnapshot& s : ledger.SnapshotAll()) {
          ASSERT_LE(s.charged_bytes, s.effective_quota_bytes) << s.tenant_id;
          ASSERT_EQ(s.effective_quota_bytes, effective[s.tenant_id]);
          ASSERT_FALSE(s.over_quota);
        }
        samples.fetch_add(1);
        std::this_thread::yield();
      }
    };
    sample();
    sampler_exited.store(true);
  });
  std::vector<Held> held(kThreads);
  std::vector<std::thread> workers;
  std::atomic<bool> go{false}, more{true};
  for (int i = 0; i < kThreads; ++i) {
    workers.emplace_back([&, i] { Worker(ledger, 1000 + i, held[i], go, more); });
  }
  go.store(true);
  // Keep the workers going until the sampler has looked often enough (bounded by a deadline).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (samples.load() < kMinSamples && !sampler_exited.load() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  more.store(false);
  for (std::thread& w : workers) w.join();
  done.store(true);
  sampler.join();
  if (!HasFailure()) {  // a failed sampler stops early
    EXPECT_GE(samples.load(), kMinSamples);
  }
  RecordProperty("samples", std::to_string(samples.load()));

  uint64_t quota_rejects = 0;
  for (const Held& h : held) quota_rejects += h.quota_rejects;
  uint64_t counted = 0;
  for (const TenantSnapshot& s : ledger.SnapshotAll()) counted += s.rejects_quota;
  EXPECT_EQ(counted, quota_rejects);
  EXPECT_GT(quota_rejects, 0u) << "the quotas never bit; the test proves little";
  ExpectLedgerMatches(ledger, held);
}

// All threads charge one byte at a time at the same tenant until refused, round after round:
// the CAS must admit exactly the quota every time, never a byte more (a check-then-add would
// overshoot when two threads pass the check at quota - 1).
TEST(QuotaLedgerConcurrency, ChargesRacingAtTheQuotaAdmitExactlyTheQuota) {
  constexpr uint64_t kQuota = 256;
  constexpr int kRounds = 300;
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(MakePolicy({{"t", kQuota}}), kBig);
  std::atomic<uint64_t> admitted{0};
  std::atomic<int> bad_rounds{0};
  std::barrier round_end(kThreads, [&]() noexcept {
    TenantSnapshot s = ledger.Snapshot("t").value_or(TenantSnapshot{});
    if (s.charged_bytes != kQuota || admitted.load() != kQuota) bad_rounds.fetch_add(1);
    ledger.Refund("t", s.charged_bytes);
    admitted.store(0);
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      for (int round = 0; round < kRounds; ++round) {
        while (ledger.Charge("t", 1).ok()) admitted.fetch_add(1);
        round_end.arrive_and_wait();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad_rounds.load(), 0);
  EXPECT_EQ(Snap(ledger, "t").charged_bytes, 0u);
}

// Quotas and capacity move (and t3 comes and goes) while the workers run. charged may then
// exceed effective, but only because the quota dropped under it: within one policy interval a
// tenant over its quota never grows, and once under it stays under. The sampler knows which
// interval a snapshot belongs to from a generation counter (odd while a change is in progress).
TEST(QuotaLedgerConcurrency, PolicyChangesNeverLetAChargePassTheQuotaInForce) {
  QuotaLedger ledger(true);
  ledger.ApplyPolicy(
      MakePolicy({{"t0", 64 << 10}, {"t1", 64 << 10}, {"t2", 64 << 10}, {"t3", 64 << 10}}),
      uint64_t{1} << 30);
  constexpr uint64_t kMaxQuota = 256 << 10;
  constexpr uint64_t kMinPolicyChanges = 200;
  constexpr uint64_t kMinSamples = 1000;
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> done{false};

  std::thread policy_thread([&] {
    std::mt19937_64 rng(99);
    while (!done.load()) {
      std::vector<std::pair<std::string, uint64_t>> quotas;
      for (const std::string& t : kTenants) {
        if (t == "t3" && rng() % 4 == 0) continue;  // dropped: closed or gone
        quotas.emplace_back(t, 1 + rng() % kMaxQuota);
      }
      generation.fetch_add(1);
      if (rng() % 3 == 0) {
        ledger.SetCapacity(rng() % (512 << 10));
      } else {
        ledger.ApplyPolicy(MakePolicy(quotas), rng() % 2 ? uint64_t{1} << 30 : rng() % (512 << 10));
      }
      generation.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });

  std::atomic<uint64_t> checked_samples{0};
  std::atomic<bool> sampler_exited{false};  // also when an ASSERT in it fails
  std::thread sampler([&] {
    auto sample = [&] {
      struct State {
        uint64_t interval = ~uint64_t{0};
        bool seen_under = false;
        uint64_t last_charged = 0;
      };
      std::map<std::string, State> state;
      while (!done.load()) {
        uint64_t g0 = generation.load();
        std::vector<TenantSnapshot> all = ledger.SnapshotAll();
        uint64_t g1 = generation.load();
        for (const TenantSnapshot& s : all) ASSERT_LE(s.charged_bytes, kMaxQuota) << s.tenant_id;
        if (g0 % 2 == 1 || g1 != g0) continue;  // raced a change: interval unknown
        const uint64_t interval = g0 / 2;
        std::map<std::string, State> next;
        for (const TenantSnapshot& s : all) {
          State st = state.count(s.tenant_id) ? state[s.tenant_id] : State{};
          if (st.interval != interval)
            st = State{interval, false, 0};
          else if (!st.seen_under) {
            // Over its quota at the last sample of this interval: it cannot have grown.
            ASSERT_LE(s.charged_bytes, st.last_charged) << s.tenant_id;
          }
          if (st.seen_under) {
            ASSERT_LE(s.charged_bytes, s.effective_quota_bytes) << s.tenant_id;
          }
          ASSERT_EQ(s.over_quota, s.charged_bytes > s.effective_quota_bytes);
          if (s.charged_bytes <= s.effective_quota_bytes) st.seen_under = true;
          st.last_charged = s.charged_bytes;
          next[s.tenant_id] = st;
        }
        state = std::move(next);  // an account that vanished starts afresh
        checked_samples.fetch_add(1);
        std::this_thread::yield();
      }
    };
    sample();
    sampler_exited.store(true);
  });

  std::vector<Held> held(kThreads);
  std::vector<std::thread> workers;
  // Two shared cores schedule coarsely: keep the workers going until enough policy changes and
  // checked samples overlapped them (bounded by a deadline).
  std::atomic<bool> go{false}, more{true};
  for (int i = 0; i < kThreads; ++i) {
    workers.emplace_back([&, i] { Worker(ledger, 5000 + i, held[i], go, more); });
  }
  go.store(true);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((generation.load() / 2 < kMinPolicyChanges || checked_samples.load() < kMinSamples) &&
         !sampler_exited.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  more.store(false);
  for (std::thread& w : workers) w.join();
  done.store(true);
  policy_thread.join();
  sampler.join();
  if (!HasFailure()) {  // a failed sampler stops early
    EXPECT_GE(generation.load() / 2, kMinPolicyChanges);
    EXPECT_GE(checked_samples.load(), kMinSamples);
  }
  RecordProperty("policy_changes", std::to_string(generation.load() / 2));
  RecordProperty("checked_samples", std::to_string(checked_samples.load()));
  ExpectLedgerMatches(ledger, held);
}

}  // namespace
}  // namespace granary::master::tenant
