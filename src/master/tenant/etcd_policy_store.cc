#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/etcd/etcd_client.h"
#include "common/status_macros.h"
#include "master/tenant/policy_store.h"

namespace granary::master::tenant {
namespace {

// The policy in etcd, through the process's etcd client (common/etcd): a range to load, a put
// (or, with a write guard, a txn guarded by the master's epoch) to save. Load and Save are
// rare (startup, polls, admin writes).
//
// Thread-safe (EtcdClient is; the rest is immutable). Owned by whoever created it (the master).
class EtcdPolicyStore final : public PolicyStore {
 public:
  EtcdPolicyStore(std::unique_ptr<etcd::EtcdClient> client, std::string key, WriteGuard guard)
      : client_(std::move(client)), key_(std::move(key)), guard_(std::move(guard)) {}

  absl::StatusOr<Policy> Load() override {
    absl::StatusOr<etcd::RangeResult> range = client_->Range(key_);
    if (!range.ok()) return Prefixed(range.status());
    // No such key is an empty policy.
    if (range->kvs.empty()) return Policy{};
    absl::StatusOr<Policy> policy = ParsePolicy(range->kvs[0].value);
    if (!policy.ok()) return Prefixed(policy.status());
    return policy;
  }

  absl::Status Save(const Policy& policy) override {
    std::string yaml = SerializePolicy(policy);
    // Never store what Load would refuse (a bad name, a zero quota, a duplicate).
    if (absl::StatusOr<Policy> check = ParsePolicy(yaml); !check.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("refusing to save an invalid policy: ", check.status().message()));
    }
    if (guard_.view_key.empty()) return Prefixed(client_->Put(key_, yaml).status());
    const int64_t epoch = guard_.epoch();
    if (epoch == 0) {
      return common::WithReason(
          absl::UnavailableError("NOT_ACTIVE: this master is not the active one"),
          ErrorReason::kNotActive);
    }
    absl::StatusOr<etcd::TxnResult> txn = client_->Txn(
        {etcd::Compare::CreateRevision(guard_.view_key, epoch)}, {etcd::Op::Put(key_, yaml)});
    if (!txn.ok()) return Prefixed(txn.status());
    if (!txn->succeeded) {
      if (guard_.on_lost) guard_.on_lost();
      return common::WithReason(
          absl::UnavailableError(absl::StrCat(
              "NOT_ACTIVE: ", guard_.view_key, " is no longer at epoch ", epoch,
              " (another master leads): this master fenced itself and stored nothing")),
          ErrorReason::kNotActive);
    }
    return absl::OkStatus();
  }

  std::string Describe() const override { return absl::StrCat(client_->Describe(), "/", key_); }

 private:
  absl::Status Prefixed(const absl::Status& st) const {
    if (st.ok()) return st;
    return absl::Status(st.code(), absl::StrCat(Describe(), ": ", st.message()));
  }

  const std::unique_ptr<etcd::EtcdClient> client_;
  const std::string key_;
  const WriteGuard guard_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PolicyStore>> NewEtcdPolicyStore(const std::string& endpoints,
                                                                const std::string& cluster_id,
                                                                int timeout_ms, WriteGuard guard) {
  GRANARY_ASSIGN_OR_RETURN(std::unique_ptr<etcd::EtcdClient> client,
                           etcd::EtcdClient::Create(endpoints, timeout_ms));
  if (cluster_id.empty() || cluster_id.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("invalid cluster id '", cluster_id,
                                                   "': must be non-empty and contain no '/'"));
  }
  return std::make_unique<EtcdPolicyStore>(
      std::move(client), absl::StrCat("granary/", cluster_id, "/tenant_quota_policy"),
      std::move(guard));
}

}  // namespace granary::master::tenant
