#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "master/tenant/policy.h"

namespace granary::master::tenant {

// What the admin API and metrics show for one tenant.
struct TenantSnapshot {
  std::string tenant_id;
  uint64_t requested_quota_bytes = 0;
  uint64_t effective_quota_bytes = 0;
  uint64_t charged_bytes = 0;   // committed + in flight
  uint64_t inflight_bytes = 0;  // charged for allocations not yet committed
  uint64_t entries = 0;         // committed objects
  std::optional<uint64_t> max_entries;
  bool pool_spill = false;  // the policy's pool_spill (placement.h)
  common::TierPreference default_tier = common::TierPreference::kHost;  // the policy's default_tier
  bool admission_closed = false;
  bool over_quota = false;  // charged > effective (after a quota was lowered)
  bool has_explicit_policy = false;
  uint64_t rejects_quota = 0;   // writes refused with QUOTA_EXCEEDED
  uint64_t rejects_closed = 0;  // writes refused because admission is closed
  uint64_t rejects_unregistered = 0;
  // Objects, and their charged bytes (every replica), that eviction took from the tenant: for
  // space, its quota or its max_entries. Remove and node loss do not count. Kept as long as the
  // account (a tenant dropped from the policy once empty starts again at 0).
  uint64_t evicted_objects = 0;
  uint64_t evicted_bytes = 0;
};

// Per-tenant byte accounting for admission at allocation time. Charging cannot race: a tenant's
// charged bytes live in one atomic that Charge moves with compare-and-swap, so charged never
// exceeds the effective quota in force at the moment of the charge, whatever the number of
// threads. (It can exceed a quota that was lowered later: that tenant is over_quota and every
// Charge is refused until it is back under.) Policy and capacity changes, and creating or
// removing accounts, take `mu_` exclusively; Charge, Commit, Refund, Release(Bytes) and the
// snapshots take it shared. Cost per Charge of a known tenant: one shared acquire/release of
// `mu_`, one hash of the tenant id and lookup, one CAS on `charged` (retried only when another
// thread moved it in between) and one fetch_add on `inflight`; no allocation, no exclusive
// lock. A refusal adds one fetch_add on a reject counter and builds the error message (one
// allocation). Commit, Refund, Release: the shared lock, the lookup and two atomic
// read-modify-writes (ReleaseBytes: one). Exceptions, once per tenant: the first Charge of an
// unknown tenant without enforcement, and the Refund/Release that empties a closed account,
// take `mu_` exclusively to create or remove the account.
//
// Lifecycle of bytes: Charge (in flight) -> Commit (in flight -> committed) -> Release
// (committed -> gone). Refund gives back in-flight bytes that never committed (revoke, failure,
// expiry, session death, the unused part of a partial completion).
//
// Caller contract (the MasterService keeps it; a breach is a CHECK failure, never an error):
// Commit and Refund only move bytes that an earlier successful Charge of the same tenant put in
// flight and that were not yet committed or refunded; Release and ReleaseBytes only free bytes
// that an earlier Commit of the same tenant committed (Release: of one entry it committed). In
// particular Commit/Refund/Release of a tenant that has no account, or of more than it holds,
// crashes.
//
// Thread-safe. Owned by the MasterService; lives as long as it.
class QuotaLedger {
 public:
  // enforce=false: multi-tenant mode off. Accounts are still kept (for metrics) but Charge
  // never refuses and unregistered tenants are created on demand.
  explicit QuotaLedger(bool enforce);

  // Replaces the policy (a valid one, as ParsePolicy returns: unique names; a duplicate name is
  // a CHECK failure). Tenants dropped from it that still hold charge or entries stay as accounts
  // with admission closed (readable and removable, no new writes, evicted first); those without
  // either disappear. A closed account disappears by itself as soon as a Refund or Release
  // brings it to zero charge and zero entries. A tenant that is added back is open again.
  // Without enforcement, dropped tenants become plain on-demand accounts (never closed) and
  // on-demand accounts without charge or entries are dropped here. Recomputes effective quotas
  // against `capacity_bytes`.
  void ApplyPolicy(const Policy& policy, uint64_t capacity_bytes);
  // Recomputes effective quotas after segments were mounted or unmounted. `capacity_bytes` is
  // the shared capacity; `pooled`, when given, replaces the set of tenants with a pool mounted
  // (placement.h). Such a tenant whose policy does not allow pool_spill takes no shared space:
  // it is left out of the scaling and its effective quota is its request (its pool bounds it).
  void SetCapacity(uint64_t capacity_bytes,
                   std::optional<absl::flat_hash_set<std::string>> pooled = std::nullopt);

  // Admission: charges `bytes` as in flight. Errors (RESOURCE_EXHAUSTED with an ErrorReason,
  // whose name also starts the message, for people): kTenantNotRegistered (strict mode, unknown
  // tenant), kAdmissionClosed, kQuotaExceeded (would pass effective quota; the message gives
  // charged, requested bytes and effective quota; an over-quota tenant is refused whatever the
  // size). Counts rejects by reason; rejects of unknown tenants are kept aside (for at most
  // kMaxTrackedUnregistered names) and show in the account once the tenant is registered.
  // enforce=false: never refuses; an unknown tenant gets an account.
  [[nodiscard]] absl::Status Charge(absl::string_view tenant, uint64_t bytes);
  // In flight -> committed, and one more entry.
  void Commit(absl::string_view tenant, uint64_t bytes);
  // In flight -> committed for an existing entry (a copy added a replica): no new entry.
  void CommitBytes(absl::string_view tenant, uint64_t bytes);
  // Gives back in-flight bytes that will never commit.
  void Refund(absl::string_view tenant, uint64_t bytes);
  // Frees committed bytes of one entry (remove, eviction, node loss).
  void Release(absl::string_view tenant, uint64_t bytes);
  // Release of an entry that eviction took: also counts it in evicted_objects/evicted_bytes.
  void ReleaseEvicted(absl::string_view tenant, uint64_t bytes);
  // Frees committed bytes but keeps the entry: one replica of an object was lost and the
  // object stays with the others.
  void ReleaseBytes(absl::string_view tenant, uint64_t bytes);
  // A master rebuilding from node inventories: `bytes` of stored objects become committed
  // without admission (they are in memory already), and `entries` more entries (one per
  // object, none for a second replica). A tenant without an account gets one: with enforcement
  // and no policy entry it is closed to admission, as a tenant dropped from the policy is
  // (readable, removable).
  void Restore(absl::string_view tenant, uint64_t bytes, uint64_t entries);

  // A snapshot reads each counter atomically but not all of them at one instant (a concurrent
  // Commit may show in `entries` before `inflight`). nullopt for a tenant without an account.
  // The master's own tenants (names starting with '_', such as _probe) are never charged and
  // never appear in snapshots: every call above is a no-op for them.
  static bool IsReserved(absl::string_view tenant) { return !tenant.empty() && tenant[0] == '_'; }

  std::optional<TenantSnapshot> Snapshot(absl::string_view tenant) const;
  std::vector<TenantSnapshot> SnapshotAll() const;  // sorted by tenant id
  // charged > effective with enforcement on; always false without it.
  bool IsOverQuota(absl::string_view tenant) const;
  // The policy's pool_spill for the tenant (false without an account or policy entry). One
  // shared acquire of `mu_` and a lookup.
  bool PoolSpill(absl::string_view tenant) const;
  // The policy's default_tier for the tenant (host without an account or policy entry). One
  // shared acquire of `mu_` and a lookup.
  common::TierPreference DefaultTier(absl::string_view tenant) const;
  bool enforce() const { return enforce_; }
  uint64_t capacity() const;
  // Sum of the requested quotas of the policy's tenants (saturates at 2^64-1).
  uint64_t requested_sum() const;
  // All writes refused with TENANT_NOT_REGISTERED, whatever the tenant id.
  uint64_t rejects_unregistered_total() const;

  // How many distinct unregistered tenant ids keep their own reject count (beyond that only
  // the total counts): the ids come from clients and must not grow memory without bound.
  static constexpr size_t kMaxTrackedUnregistered = 1024;

  // effective = requested, each first clamped to `capacity` (a request above the whole
  // capacity counts as the capacity, so a typo such as 2^63-1 bytes cannot scale every other
  // tenant down to 0), then scaled down proportionally when the clamped requests sum past
  // capacity, by largest remainder, ties broken by name. If they fit, effective == clamped
  // request; otherwise each gets floor(clamped * capacity / sum) (128-bit arithmetic: the sum
  // cannot overflow) and the bytes left over go one each to the largest fractional remainders
  // (ties: name ascending), so the effective quotas sum to exactly `capacity` and none exceeds
  // its request. capacity 0: all 0. Exposed for tests.
  static std::map<std::string, uint64_t> ComputeEffective(
      const std::map<std::string, uint64_t>& requested, uint64_t capacity);

 private:
  // One tenant. Lives in a unique_ptr so its address is stable while `mu_` is held shared.
  // The plain fields are written only with `mu_` held exclusively and read with it shared; the
  // atomics move with `mu_` held shared (relaxed: each is one self-contained counter, and the
  // only cross-counter promise, charged <= effective at charge time, is one CAS on `charged`).
  struct alignas(64) Account {
    std::string tenant_id;
    uint64_t requested_quota_bytes = 0;
    uint64_t effective_quota_bytes = 0;
    std::optional<uint64_t> max_entries;
    bool pool_spill = false;
    common::TierPreference default_tier = common::TierPreference::kHost;
    bool has_explicit_policy = false;
    bool admission_closed = false;
    bool quota_clamped = false;        // requested > capacity at the last recompute (warned once)
    std::atomic<uint64_t> charged{0};  // committed + in flight
    std::atomic<uint64_t> inflight{0};
    std::atomic<uint64_t> entries{0};
    std::atomic<uint64_t> rejects_quota{0};
    std::atomic<uint64_t> rejects_closed{0};
    std::atomic<uint64_t> rejects_unregistered{0};
    std::atomic<uint64_t> evicted_objects{0};
    std::atomic<uint64_t> evicted_bytes{0};
  };
  using AccountMap = absl::flat_hash_map<std::string, std::unique_ptr<Account>>;

  [[nodiscard]] absl::Status ChargeAccount(Account& account, uint64_t bytes) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  Account& FindOrDie(absl::string_view tenant, const char* op) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RecordUnregistered(absl::string_view tenant) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  TenantSnapshot MakeSnapshot(const Account& account) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Refund, Release(Evicted) and ReleaseBytes: takes the counts off the account (CHECKing that
  // it holds them), counts an eviction when `evicted`, then forgets a closed account that now
  // holds nothing.
  void GiveBack(absl::string_view tenant, const char* op, uint64_t inflight_bytes,
                uint64_t charged_bytes, uint64_t entries, bool evicted = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Removes `tenant` if it is closed and holds nothing (takes `mu_` exclusively).
  void ForgetIfClosedAndEmpty(absl::string_view tenant) ABSL_LOCKS_EXCLUDED(mu_);
  void RecomputeEffectiveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ConfinedToPoolLocked(const Account& account) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const bool enforce_;
  mutable granary::common::Mutex mu_;
  AccountMap accounts_ ABSL_GUARDED_BY(mu_);
  uint64_t capacity_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<std::string> pooled_ ABSL_GUARDED_BY(mu_);  // tenants with a pool mounted

  // Rejects of tenants without an account. Lock order: mu_ (shared or exclusive), then
  // unregistered_mu_.
  mutable granary::common::Mutex unregistered_mu_ ABSL_ACQUIRED_AFTER(mu_);
  absl::flat_hash_map<std::string, uint64_t> unregistered_rejects_
      ABSL_GUARDED_BY(unregistered_mu_);
  std::atomic<uint64_t> rejects_unregistered_total_{0};
};

}  // namespace granary::master::tenant
