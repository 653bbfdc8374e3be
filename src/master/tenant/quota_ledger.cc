#include "master/tenant/quota_ledger.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/log.h"

namespace granary::master::tenant {
namespace {

// Every counter is self-contained (see Account), so relaxed ordering is enough; `mu_` orders
// everything else.
constexpr std::memory_order kRelaxed = std::memory_order_relaxed;

// Tenant ids come from clients: escape them before they go into a message.
std::string Quoted(absl::string_view tenant) {
  return absl::StrCat("'", absl::CHexEscape(tenant), "'");
}

// Subtracts `bytes` from `counter`; taking more than it holds is a broken caller contract.
void SubtractOrDie(std::atomic<uint64_t>& counter, uint64_t bytes, absl::string_view what,
                   absl::string_view op, absl::string_view tenant) {
  uint64_t before = counter.fetch_sub(bytes, kRelaxed);
  GRANARY_CHECK(before >= bytes) << op << " of " << bytes << " bytes for tenant " << Quoted(tenant)
                                 << " but only " << before << " " << what << " are held";
}

}  // namespace

QuotaLedger::QuotaLedger(bool enforce) : enforce_(enforce) {}

std::map<std::string, uint64_t> QuotaLedger::ComputeEffective(
    const std::map<std::string, uint64_t>& requested, uint64_t capacity) {
  using u128 = unsigned __int128;
  // A request above the whole capacity counts as the capacity: two tenants asking for 2^63-1
  // bytes (a typo) then take two shares of the capacity, not all of it. The sum of at most
  // 2^64 requests of less than 2^64 each fits in 128 bits.
  std::map<std::string, uint64_t> clamped = requested;
  u128 sum = 0;
  for (auto& [name, bytes] : clamped) {
    bytes = std::min(bytes, capacity);
    sum += bytes;
  }
  if (sum <= capacity) return clamped;

  // Scale down: floor shares first, then the leftover bytes (fewer than the number of tenants)
  // one each to the largest remainders. std::map iterates by name ascending and stable_sort
  // keeps that order among equal remainders, which breaks ties by name.
  struct Share {
    const std::string* name;
    uint64_t floor;
    u128 remainder;
  };
  std::vector<Share> shares;
  shares.reserve(requested.size());
  uint64_t handed_out = 0;
  for (const auto& [name, bytes] : clamped) {
    u128 scaled = static_cast<u128>(bytes) * capacity;
    // scaled / sum < bytes <= 2^64-1, so the quotient fits.
    uint64_t floor = static_cast<uint64_t>(scaled / sum);
    shares.push_back({&name, floor, scaled % sum});
    handed_out += floor;  // <= capacity, no overflow
  }
  uint64_t leftover = capacity - handed_out;
  GRANARY_CHECK(leftover < shares.size()) << "leftover " << leftover;
  std::stable_sort(shares.begin(), shares.end(),
                   [](const Share& a, const Share& b) { return a.remainder > b.remainder; });
  std::map<std::string, uint64_t> effective;
  for (size_t i = 0; i < shares.size(); ++i) {
    effective[*shares[i].name] = shares[i].floor + (i < leftover ? 1 : 0);
  }
  return effective;
}

bool QuotaLedger::ConfinedToPoolLocked(const Account& account) const {
  return !account.pool_spill && pooled_.contains(account.tenant_id);
}

void QuotaLedger::RecomputeEffectiveLocked() {
  std::map<std::string, uint64_t> requested;
  for (const auto& [name, account] : accounts_) {
    if (account->has_explicit_policy && !ConfinedToPoolLocked(*account)) {
      requested[name] = account->requested_quota_bytes;
    }
  }
  std::map<std::string, uint64_t> effective = ComputeEffective(requested, capacity_bytes_);
  for (auto& [name, account] : accounts_) {
    auto it = effective.find(name);
    account->effective_quota_bytes = it == effective.end() ? 0 : it->second;
    // Said once each time a request starts to count as the capacity (not at every mount), and
    // not while nothing is mounted (every request is above a capacity of 0 then).
    const bool clamped = requested.contains(name) && capacity_bytes_ > 0 &&
                         account->requested_quota_bytes > capacity_bytes_;
    if (clamped && !account->quota_clamped) {
      GRANARY_LOG_WARN << "tenant " << Quoted(name) << " requests a quota of "
                       << account->requested_quota_bytes
                       << " bytes, above the cluster's shared capacity of " << capacity_bytes_
                       << " bytes: it counts as " << capacity_bytes_
                       << " bytes when quotas are shared out (effective quota "
                       << account->effective_quota_bytes << " bytes)";
    }
    account->quota_clamped = clamped;
    // Its own pool bounds it, and it takes no shared space: its request stands as it is.
    if (account->has_explicit_policy && ConfinedToPoolLocked(*account)) {
      account->effective_quota_bytes = account->requested_quota_bytes;
    }
  }
}

void QuotaLedger::ApplyPolicy(const Policy& policy, uint64_t capacity_bytes) {
  granary::common::MutexLock lock(&mu_);
  absl::flat_hash_map<std::string, const TenantPolicy*> wanted;
  for (const TenantPolicy& tp : policy.tenants) {
    GRANARY_CHECK(wanted.emplace(tp.name, &tp).second)
        << "duplicate tenant " << Quoted(tp.name) << " in a policy";
  }
  // Tenants that left the policy: closed while they hold anything, gone otherwise.
  for (auto it = accounts_.begin(); it != accounts_.end();) {
    Account& account = *it->second;
    auto next = std::next(it);
    if (!wanted.contains(it->first)) {
      bool holds = account.charged.load(kRelaxed) != 0 || account.entries.load(kRelaxed) != 0;
      if (!holds) {
        accounts_.erase(it);
      } else {
        account.has_explicit_policy = false;
        account.requested_quota_bytes = 0;
        account.max_entries.reset();
        account.pool_spill = false;
        account.default_tier = common::TierPreference::kHost;
        // Without enforcement nothing is ever closed: the account is a plain on-demand one.
        account.admission_closed = enforce_;
      }
    }
    it = next;
  }
  {
    granary::common::MutexLock unregistered_lock(&unregistered_mu_);
    for (const auto& [name, tp] : wanted) {
      std::unique_ptr<Account>& slot = accounts_[name];
      if (slot == nullptr) {
        slot = std::make_unique<Account>();
        slot->tenant_id = name;
        // Rejects counted while the tenant was unknown now show in its account.
        auto pending = unregistered_rejects_.find(name);
        if (pending != unregistered_rejects_.end()) {
          slot->rejects_unregistered.store(pending->second, kRelaxed);
          unregistered_rejects_.erase(pending);
        }
      }
      slot->requested_quota_bytes = tp->quota_bytes;
      slot->max_entries = tp->max_entries;
      slot->pool_spill = tp->pool_spill;
      slot->default_tier = tp->default_tier;
      slot->has_explicit_policy = true;
      slot->admission_closed = false;
    }
  }
  capacity_bytes_ = capacity_bytes;
  RecomputeEffectiveLocked();
}

void QuotaLedger::SetCapacity(uint64_t capacity_bytes,
                              std::optional<absl::flat_hash_set<std::string>> pooled) {
  granary::common::MutexLock lock(&mu_);
  capacity_bytes_ = capacity_bytes;
  if (pooled.has_value()) pooled_ = std::move(*pooled);
  RecomputeEffectiveLocked();
}

absl::Status QuotaLedger::ChargeAccount(Account& account, uint64_t bytes) const {
  if (account.admission_closed) {
    account.rejects_closed.fetch_add(1, kRelaxed);
    return common::WithReason(
        absl::ResourceExhaustedError(
            absl::StrCat("ADMISSION_CLOSED: tenant ", Quoted(account.tenant_id),
                         " was removed from the quota policy; its data can be read and removed, "
                         "but no new writes are admitted")),
        ErrorReason::kAdmissionClosed);
  }
  if (!enforce_) {
    account.charged.fetch_add(bytes, kRelaxed);
  } else {
    // `effective` cannot change while `mu_` is held shared, so this CAS is the whole decision:
    // charged only ever moves up from a value `cur` to `cur + bytes <= effective`.
    const uint64_t effective = account.effective_quota_bytes;
    uint64_t cur = account.charged.load(kRelaxed);
    do {
      if (cur > effective || bytes > effective - cur) {
        account.rejects_quota.fetch_add(1, kRelaxed);
        return common::WithReason(
            absl::ResourceExhaustedError(absl::StrCat(
                "QUOTA_EXCEEDED: tenant ", Quoted(account.tenant_id), ": charged ", cur,
                " bytes + requested ", bytes, " bytes > effective quota ", effective, " bytes",
                cur > effective ? " (over quota: writes are refused until it is back under)" : "")),
            ErrorReason::kQuotaExceeded);
      }
    } while (!account.charged.compare_exchange_weak(cur, cur + bytes, kRelaxed, kRelaxed));
  }
  account.inflight.fetch_add(bytes, kRelaxed);
  return absl::OkStatus();
}

void QuotaLedger::RecordUnregistered(absl::string_view tenant) {
  rejects_unregistered_total_.fetch_add(1, kRelaxed);
  granary::common::MutexLock lock(&unregistered_mu_);
  auto it = unregistered_rejects_.find(tenant);
  if (it != unregistered_rejects_.end()) {
    ++it->second;
  } else if (unregistered_rejects_.size() < kMaxTrackedUnregistered) {
    unregistered_rejects_.emplace(std::string(tenant), 1);
  }
}

absl::Status QuotaLedger::Charge(absl::string_view tenant, uint64_t bytes) {
  if (IsReserved(tenant)) return absl::OkStatus();
  {
    granary::common::ReaderMutexLock lock(&mu_);
    auto it = accounts_.find(tenant);
    if (it != accounts_.end()) return ChargeAccount(*it->second, bytes);
    if (enforce_) {
      // Recorded under the shared lock so that an ApplyPolicy registering the tenant cannot
      // slip in between and miss this reject when it takes the pending count over.
      RecordUnregistered(tenant);
      return common::WithReason(
          absl::ResourceExhaustedError(absl::StrCat("TENANT_NOT_REGISTERED: tenant ",
                                                    Quoted(tenant), " has no quota policy")),
          ErrorReason::kTenantNotRegistered);
    }
  }
  // Without enforcement an unknown tenant gets an account (rare: once per tenant).
  granary::common::MutexLock lock(&mu_);
  std::unique_ptr<Account>& slot = accounts_[tenant];
  if (slot == nullptr) {
    slot = std::make_unique<Account>();
    slot->tenant_id = std::string(tenant);
  }
  return ChargeAccount(*slot, bytes);
}

QuotaLedger::Account& QuotaLedger::FindOrDie(absl::string_view tenant, const char* op) const {
  auto it = accounts_.find(tenant);
  GRANARY_CHECK(it != accounts_.end())
      << op << " for tenant " << Quoted(tenant) << ", which holds nothing";
  return *it->second;
}

void QuotaLedger::Commit(absl::string_view tenant, uint64_t bytes) {
  if (IsReserved(tenant)) return;
  granary::common::ReaderMutexLock lock(&mu_);
  Account& account = FindOrDie(tenant, "Commit");
  // A closed tenant may still commit what it had in flight when its policy was removed.
  SubtractOrDie(account.inflight, bytes, "bytes in flight", "Commit", tenant);
  account.entries.fetch_add(1, kRelaxed);
}

void QuotaLedger::CommitBytes(absl::string_view tenant, uint64_t bytes) {
  if (IsReserved(tenant)) return;
  granary::common::ReaderMutexLock lock(&mu_);
  Account& account = FindOrDie(tenant, "CommitBytes");
  SubtractOrDie(account.inflight, bytes, "bytes in flight", "CommitBytes", tenant);
}

void QuotaLedger::Restore(absl::string_view tenant, uint64_t bytes, uint64_t entries) {
  if (IsReserved(tenant)) return;
  {
    granary::common::ReaderMutexLock lock(&mu_);
    auto it = accounts_.find(tenant);
    if (it != accounts_.end()) {
      it->second->charged.fetch_add(bytes, kRelaxed);
      it->second->entries.fetch_add(entries, kRelaxed);
      return;
    }
  }
  granary::common::MutexLock lock(&mu_);
  std::unique_ptr<Account>& slot = accounts_[tenant];
  if (slot == nullptr) {
    slot = std::make_unique<Account>();
    slot->tenant_id = std::string(tenant);
    slot->admission_closed = enforce_;
  }
  slot->charged.fetch_add(bytes, kRelaxed);
  slot->entries.fetch_add(entries, kRelaxed);
}

void QuotaLedger::Refund(absl::string_view tenant, uint64_t bytes) {
  if (IsReserved(tenant)) return;
  GiveBack(tenant, "Refund", /*inflight_bytes=*/bytes, /*charged_bytes=*/bytes, /*entries=*/0);
}

void QuotaLedger::Release(absl::string_view tenant, uint64_t bytes) {
  if (IsReserved(tenant)) return;
  GiveBack(tenant, "Release", /*inflight_bytes=*/0, /*charged_bytes=*/bytes, /*entries=*/1);
}

void QuotaLedger::ReleaseEvicted(absl::string_view tenant, uint64_t bytes) {
  if (IsReserved(tenant)) return;
  GiveBack(tenant, "ReleaseEvicted", /*inflight_bytes=*/0, /*charged_bytes=*/bytes, /*entries=*/1,
           /*evicted=*/true);
}

void QuotaLedger::ReleaseBytes(absl::string_view tenant, uint64_t bytes) {
  if (IsReserved(tenant)) return;
  GiveBack(tenant, "ReleaseBytes", /*inflight_bytes=*/0, /*charged_bytes=*/bytes,
           /*entries=*/0);
}

void QuotaLedger::GiveBack(absl::string_view tenant, const char* op, uint64_t inflight_bytes,
                           uint64_t charged_bytes, uint64_t entries, bool evicted) {
  bool forget;
  {
    granary::common::ReaderMutexLock lock(&mu_);
    Account& account = FindOrDie(tenant, op);
    // In flight before charged, so that charged >= inflight holds at every instant.
    if (entries != 0) SubtractOrDie(account.entries, entries, "entries", op, tenant);
    if (inflight_bytes != 0) {
      SubtractOrDie(account.inflight, inflight_bytes, "bytes in flight", op, tenant);
    }
    SubtractOrDie(account.charged, charged_bytes, "charged bytes", op, tenant);
    if (evicted) {
      account.evicted_objects.fetch_add(entries, kRelaxed);
      account.evicted_bytes.fetch_add(charged_bytes, kRelaxed);
    }
    forget = account.admission_closed && account.charged.load(kRelaxed) == 0 &&
             account.entries.load(kRelaxed) == 0;
  }
  // The last bytes of a closed tenant: drop the account now rather than at the next policy.
  if (forget) ForgetIfClosedAndEmpty(tenant);
}

void QuotaLedger::ForgetIfClosedAndEmpty(absl::string_view tenant) {
  granary::common::MutexLock lock(&mu_);
  auto it = accounts_.find(tenant);
  // Checked again: the policy may have reopened the tenant in between. A closed account can
  // not gain charge (Charge refuses it), so empty now means empty for good.
  if (it == accounts_.end()) return;
  const Account& account = *it->second;
  if (account.admission_closed && account.charged.load(kRelaxed) == 0 &&
      account.entries.load(kRelaxed) == 0) {
    accounts_.erase(it);
  }
}

TenantSnapshot QuotaLedger::MakeSnapshot(const Account& account) const {
  TenantSnapshot s;
  s.tenant_id = account.tenant_id;
  s.requested_quota_bytes = account.requested_quota_bytes;
  s.effective_quota_bytes = account.effective_quota_bytes;
  s.charged_bytes = account.charged.load(kRelaxed);
  s.inflight_bytes = account.inflight.load(kRelaxed);
  s.entries = account.entries.load(kRelaxed);
  s.max_entries = account.max_entries;
  s.pool_spill = account.pool_spill;
  s.default_tier = account.default_tier;
  s.admission_closed = account.admission_closed;
  s.over_quota = enforce_ && s.charged_bytes > s.effective_quota_bytes;
  s.has_explicit_policy = account.has_explicit_policy;
  s.rejects_quota = account.rejects_quota.load(kRelaxed);
  s.rejects_closed = account.rejects_closed.load(kRelaxed);
  s.rejects_unregistered = account.rejects_unregistered.load(kRelaxed);
  s.evicted_objects = account.evicted_objects.load(kRelaxed);
  s.evicted_bytes = account.evicted_bytes.load(kRelaxed);
  return s;
}

std::optional<TenantSnapshot> QuotaLedger::Snapshot(absl::string_view tenant) const {
  granary::common::ReaderMutexLock lock(&mu_);
  auto it = accounts_.find(tenant);
  if (it == accounts_.end()) return std::nullopt;
  return MakeSnapshot(*it->second);
}

std::vector<TenantSnapshot> QuotaLedger::SnapshotAll() const {
  std::vector<TenantSnapshot> out;
  {
    granary::common::ReaderMutexLock lock(&mu_);
    out.reserve(accounts_.size());
    for (const auto& [name, account] : accounts_) out.push_back(MakeSnapshot(*account));
  }
  std::sort(out.begin(), out.end(), [](const TenantSnapshot& a, const TenantSnapshot& b) {
    return a.tenant_id < b.tenant_id;
  });
  return out;
}

bool QuotaLedger::IsOverQuota(absl::string_view tenant) const {
  if (!enforce_) return false;
  granary::common::ReaderMutexLock lock(&mu_);
  auto it = accounts_.find(tenant);
  if (it == accounts_.end()) return false;
  return it->second->charged.load(kRelaxed) > it->second->effective_quota_bytes;
}

bool QuotaLedger::PoolSpill(absl::string_view tenant) const {
  granary::common::ReaderMutexLock lock(&mu_);
  auto it = accounts_.find(tenant);
  return it != accounts_.end() && it->second->pool_spill;
}

common::TierPreference QuotaLedger::DefaultTier(absl::string_view tenant) const {
  granary::common::ReaderMutexLock lock(&mu_);
  auto it = accounts_.find(tenant);
  return it != accounts_.end() ? it->second->default_tier : common::TierPreference::kHost;
}

uint64_t QuotaLedger::capacity() const {
  granary::common::ReaderMutexLock lock(&mu_);
  return capacity_bytes_;
}

uint64_t QuotaLedger::requested_sum() const {
  granary::common::ReaderMutexLock lock(&mu_);
  uint64_t sum = 0;
  for (const auto& [name, account] : accounts_) {
    if (!account->has_explicit_policy) continue;
    uint64_t bytes = account->requested_quota_bytes;
    sum = bytes > std::numeric_limits<uint64_t>::max() - sum ? std::numeric_limits<uint64_t>::max()
                                                             : sum + bytes;
  }
  return sum;
}

uint64_t QuotaLedger::rejects_unregistered_total() const {
  return rejects_unregistered_total_.load(kRelaxed);
}

}  // namespace granary::master::tenant
