#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "master/master_options.h"
#include "master/tenant/policy.h"
#include "master/tenant/policy_store.h"
#include "master/tenant/quota_ledger.h"
#include "master/tenant/tenant_tokens.h"

namespace granary::master::tenant {

// Owns the tenant quota policy: loads it from its store (file or etcd) at start, applies it to
// the ledger, takes admin changes (saved to the store first, applied after, so a failed save
// changes nothing), reloads on request (SIGHUP) and, for etcd, polls for changes written by
// another master. If the store becomes unreachable the last good policy stays in force and
// store_status() says so.
//
// Errors carry an ErrorReason where the admin API needs one (its name also starts the message,
// for people): kUnavailableInCurrentMode, kTenantNotFound, kTenantNotEmpty.
// Thread-safe. Lives as long as the master; stops its poller when destroyed.
class TenantManager {
 public:
  // capacity() gives the allocatable bytes quotas are scaled against.
  // `guard`: with HA, the etcd store's Save is guarded by the master's epoch (policy_store.h).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TenantManager>> Create(
      const MasterOptions& options, QuotaLedger* ledger, std::function<uint64_t()> capacity,
      WriteGuard guard = {});
  // For tests: an explicit store (null with multi-tenant mode off).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TenantManager>> CreateWithStore(
      bool enabled, std::unique_ptr<PolicyStore> store, QuotaLedger* ledger,
      std::function<uint64_t()> capacity);
  ~TenantManager();

  bool enabled() const { return enabled_; }
  // Re-reads the store. An invalid or unreadable policy is an error and the running one stays.
  [[nodiscard]] absl::Status Reload();
  // Creates or updates one tenant's requested quota (and entry quota), and its pool_spill and
  // default_tier when given (nullopt keeps the tenant's: false and host for a new one).
  [[nodiscard]] absl::Status Upsert(
      const std::string& tenant, uint64_t quota_bytes, std::optional<uint64_t> max_entries,
      std::optional<bool> pool_spill = std::nullopt,
      std::optional<common::TierPreference> default_tier = std::nullopt);
  // Removes a tenant's policy; only when it owns no objects and no charge.
  [[nodiscard]] absl::Status Delete(const std::string& tenant);
  Policy policy() const;
  // The running policy's token_sha256 for a tenant (nullopt when it has none or no entry).
  // Follows reloads and admin changes; with multi-tenant mode off there is no policy.
  std::optional<std::string> TokenSha256(const std::string& tenant) const;
  // The client hello check (MasterService::SetTokenCheck): the tokens file's hashes over this
  // manager's live policy. The check calls back into the manager, which must outlive it.
  TokenCheck MakeTokenCheck(TokenHashes file_hashes, bool require) const;
  // OK, or why the store could not be read at the last attempt.
  [[nodiscard]] absl::Status store_status() const;
  std::string store_description() const;
  // Polls the store every interval_ms (etcd: changes by another master).
  void StartPolling(int64_t interval_ms);

 private:
  TenantManager(bool enabled, std::unique_ptr<PolicyStore> store, QuotaLedger* ledger,
                std::function<uint64_t()> capacity)
      : enabled_(enabled),
        store_(std::move(store)),
        ledger_(ledger),
        capacity_(std::move(capacity)) {}
  [[nodiscard]] absl::Status CheckEnabled() const;
  // Both do store I/O: called with write_mu_ held and mu_ not held (mu_ is taken only to apply
  // what the store answered, so /health and the hello token check never wait for etcd).
  [[nodiscard]] absl::Status SaveAndApply(const Policy& next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  [[nodiscard]] absl::Status RefreshBeforeWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);

  const bool enabled_;
  std::unique_ptr<PolicyStore> store_;
  QuotaLedger* ledger_;
  std::function<uint64_t()> capacity_;
  // Serializes admin changes (read, modify, save) across their store I/O. Taken before mu_.
  granary::common::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // Guards the running state; never held across store I/O.
  mutable granary::common::Mutex mu_;
  Policy policy_ ABSL_GUARDED_BY(mu_);
  absl::Status store_status_ ABSL_GUARDED_BY(mu_);
  // Bumped whenever an admin change applies a policy (one it saved, or one it re-read first).
  // Reload drops what it read if this moved meanwhile: the read may predate that policy, and
  // applying it would put the older policy back (and the next change would then save a policy
  // without the earlier one).
  uint64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  // The store is shared with other masters (etcd): an admin change first re-reads it, so it is
  // made to the stored policy rather than to a copy up to one poll interval old. Set by Create
  // before the manager is shared.
  bool refresh_before_write_ = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread poller_;
};

}  // namespace granary::master::tenant
