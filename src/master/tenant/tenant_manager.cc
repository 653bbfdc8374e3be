#include "master/tenant/tenant_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/log.h"
#include "common/size.h"
#include "common/status_macros.h"

namespace granary::master::tenant {

absl::StatusOr<std::unique_ptr<TenantManager>> TenantManager::Create(
    const MasterOptions& options, QuotaLedger* ledger, std::function<uint64_t()> capacity,
    WriteGuard guard) {
  std::unique_ptr<PolicyStore> store;
  if (options.enable_multi_tenants) {
    if (options.tenant_quota_connector_type == "etcd") {
      GRANARY_ASSIGN_OR_RETURN(
          store, NewEtcdPolicyStore(options.tenant_quota_connector_uri, options.cluster_id,
                                    /*timeout_ms=*/2000, std::move(guard)));
    } else {
      store = NewFilePolicyStore(options.tenant_quota_connector_uri);
    }
  }
  auto m =
      CreateWithStore(options.enable_multi_tenants, std::move(store), ledger, std::move(capacity));
  if (m.ok() && options.enable_multi_tenants && options.tenant_quota_connector_type == "etcd") {
    (*m)->refresh_before_write_ = true;
    (*m)->StartPolling(1000);
  }
  return m;
}

absl::StatusOr<std::unique_ptr<TenantManager>> TenantManager::CreateWithStore(
    bool enabled, std::unique_ptr<PolicyStore> store, QuotaLedger* ledger,
    std::function<uint64_t()> capacity) {
  std::unique_ptr<TenantManager> m(
      new TenantManager(enabled, std::move(store), ledger, std::move(capacity)));
  if (!enabled) return m;
  auto p = m->store_->Load();
  if (!p.ok()) {
    return absl::Status(p.status().code(),
                        absl::StrCat("cannot load the tenant quota policy from ",
                                     m->store_->Describe(), ": ", p.status().message()));
  }
  granary::common::MutexLock lock(&m->mu_);
  m->policy_ = *p;
  ledger->ApplyPolicy(*p, m->capacity_());
  GRANARY_LOG_INFO << "tenant quota policy from " << m->store_->Describe() << ": "
                   << p->tenants.size() << " tenant(s)";
  return m;
}

TenantManager::~TenantManager() {
  {
    granary::common::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (poller_.joinable()) poller_.join();
}

absl::Status TenantManager::CheckEnabled() const {
  if (enabled_) return absl::OkStatus();
  return common::WithReason(
      absl::FailedPreconditionError(
          "UNAVAILABLE_IN_CURRENT_MODE: multi-tenant quota is off (start the master "
          "with --enable_multi_tenants)"),
      ErrorReason::kUnavailableInCurrentMode);
}

absl::Status TenantManager::Reload() {
  if (absl::Status st = CheckEnabled(); !st.ok()) return st;
  uint64_t writes_before;
  {
    granary::common::MutexLock lock(&mu_);
    writes_before = writes_;
  }
  auto p = store_->Load();
  granary::common::MutexLock lock(&mu_);
  // An admin change was applied while we read: what we read may be older than it. The running
  // policy is that change; the next reload reads the store again.
  if (writes_ != writes_before) return absl::OkStatus();
  if (!p.ok()) {
    if (store_status_.ok() || store_status_.message() != p.status().message()) {
      GRANARY_LOG_ERROR << "tenant quota policy from " << store_->Describe()
                        << " not applied, keeping the running one: " << p.status();
    }
    store_status_ = p.status();
    return p.status();
  }
  if (!store_status_.ok())
    GRANARY_LOG_INFO << "tenant quota store " << store_->Describe() << " is back";
  store_status_ = absl::OkStatus();
  if (*p == policy_) return absl::OkStatus();
  policy_ = *p;
  ledger_->ApplyPolicy(*p, capacity_());
  GRANARY_LOG_INFO << "tenant quota policy reloaded: " << p->tenants.size() << " tenant(s)";
  return absl::OkStatus();
}

absl::Status TenantManager::SaveAndApply(const Policy& next) {
  absl::Status st = store_->Save(next);
  if (!st.ok()) {
    // The reason stays (NOT_ACTIVE: a fenced master's write, answered 503 by the admin API).
    return common::WithReason(
        absl::UnavailableError(absl::StrCat("saving the policy to ", store_->Describe(),
                                            " failed, nothing changed: ", st.message())),
        ErrorReasonOf(st));
  }
  granary::common::MutexLock lock(&mu_);
  ++writes_;
  policy_ = next;
  ledger_->ApplyPolicy(next, capacity_());
  return absl::OkStatus();
}

absl::Status TenantManager::RefreshBeforeWrite() {
  if (!refresh_before_write_) return absl::OkStatus();
  auto p = store_->Load();
  if (!p.ok()) {
    // Unreachable: the save would fail too. An invalid stored document: the change is made to
    // the running policy and replaces it.
    if (p.status().code() != absl::StatusCode::kUnavailable) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("reading the policy from ", store_->Describe(),
                                               " failed, nothing changed: ", p.status().message()));
  }
  granary::common::MutexLock lock(&mu_);
  if (*p == policy_) return absl::OkStatus();
  ++writes_;
  policy_ = *p;
  ledger_->ApplyPolicy(*p, capacity_());
  GRANARY_LOG_INFO << "tenant quota policy changed in " << store_->Describe() << ": "
                   << p->tenants.size() << " tenant(s)";
  return absl::OkStatus();
}

absl::Status TenantManager::Upsert(const std::string& tenant, uint64_t quota_bytes,
                                   std::optional<uint64_t> max_entries,
                                   std::optional<bool> pool_spill,
                                   std::optional<common::TierPreference> default_tier) {
  if (absl::Status st = CheckEnabled(); !st.ok()) return st;
  if (absl::Status st = ValidateTenantId(tenant); !st.ok()) return st;
  if (quota_bytes == 0 || quota_bytes > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("requested_quota_bytes ", quota_bytes, " is outside 1..2^63-1"));
  }
  if (max_entries.has_value() && *max_entries == 0) {
    return absl::InvalidArgumentError("max_entries must be a positive integer, got 0");
  }
  granary::common::MutexLock write_lock(&write_mu_);
  if (absl::Status st = RefreshBeforeWrite(); !st.ok()) return st;
  Policy next = policy();  // only admin changes (serialized by write_mu_) and reloads move it
  TenantPolicy* t = nullptr;
  for (auto& e : next.tenants) {
    if (e.name == tenant) t = &e;
  }
  if (t == nullptr) {
    TenantPolicy fresh;
    fresh.name = tenant;
    next.tenants.push_back(std::move(fresh));
    std::sort(next.tenants.begin(), next.tenants.end(),
              [](const TenantPolicy& a, const TenantPolicy& b) { return a.name < b.name; });
    for (auto& e : next.tenants) {
      if (e.name == tenant) t = &e;
    }
  }
  t->quota_bytes = quota_bytes;
  t->max_entries = max_entries;
  if (pool_spill.has_value()) t->pool_spill = *pool_spill;
  if (default_tier.has_value()) t->default_tier = *default_tier;
  absl::Status st = SaveAndApply(next);
  if (st.ok()) {
    GRANARY_LOG_INFO << "tenant '" << tenant << "' quota set to "
                     << common::FormatSize(quota_bytes);
  }
  return st;
}

absl::Status TenantManager::Delete(const std::string& tenant) {
  if (absl::Status st = CheckEnabled(); !st.ok()) return st;
  granary::common::MutexLock write_lock(&write_mu_);
  if (absl::Status st = RefreshBeforeWrite(); !st.ok()) return st;
  Policy next = policy();
  if (next.Find(tenant) == nullptr) {
    return common::WithReason(absl::NotFoundError(absl::StrCat("TENANT_NOT_FOUND: tenant '", tenant,
                                                               "' has no quota policy")),
                              ErrorReason::kTenantNotFound);
  }
  auto snap = ledger_->Snapshot(tenant);
  if (snap.has_value() && (snap->charged_bytes > 0 || snap->entries > 0)) {
    return common::WithReason(
        absl::FailedPreconditionError(absl::StrCat(
            "TENANT_NOT_EMPTY: tenant '", tenant, "' still owns ", snap->entries, " object(s) and ",
            snap->charged_bytes, " charged bytes; remove them first")),
        ErrorReason::kTenantNotEmpty);
  }
  next.tenants.erase(std::remove_if(next.tenants.begin(), next.tenants.end(),
                                    [&](const TenantPolicy& t) { return t.name == tenant; }),
                     next.tenants.end());
  absl::Status st = SaveAndApply(next);
  if (st.ok()) GRANARY_LOG_INFO << "tenant '" << tenant << "' removed from the policy";
  return st;
}

Policy TenantManager::policy() const {
  granary::common::MutexLock lock(&mu_);
  return policy_;
}

std::optional<std::string> TenantManager::TokenSha256(const std::string& tenant) const {
  granary::common::MutexLock lock(&mu_);
  const TenantPolicy* t = policy_.Find(tenant);
  if (t == nullptr || t->token_sha256.empty()) return std::nullopt;
  return t->token_sha256;
}

TokenCheck TenantManager::MakeTokenCheck(TokenHashes file_hashes, bool require) const {
  return TokenCheck(std::move(file_hashes), require,
                    [this](const std::string& tenant) { return TokenSha256(tenant); });
}

absl::Status TenantManager::store_status() const {
  granary::common::MutexLock lock(&mu_);
  return store_status_;
}

std::string TenantManager::store_description() const {
  return store_ ? store_->Describe() : "none";
}

void TenantManager::StartPolling(int64_t interval_ms) {
  poller_ = std::thread([this, interval_ms] {
    while (true) {
      {
        granary::common::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(interval_ms))) {
          return;
        }
      }
      (void)Reload();
    }
  });
}

}  // namespace granary::master::tenant
