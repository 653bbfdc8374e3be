#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "master/tenant/policy.h"

namespace granary::master::tenant {

// Where the tenant quota policy lives. Implementations are thread-safe.
class PolicyStore {
 public:
  virtual ~PolicyStore() = default;
  // Reads and validates the stored policy. The file store: a missing file is NOT_FOUND. The
  // etcd store: a missing key is an empty policy; an unreachable etcd is UNAVAILABLE.
  [[nodiscard]] virtual absl::StatusOr<Policy> Load() = 0;
  // Stores the policy durably; on error nothing changed. The file store writes a temporary
  // file in the same directory, fsyncs it and renames it over the old one.
  [[nodiscard]] virtual absl::Status Save(const Policy& policy) = 0;
  // A short description for logs and /health ("file:/etc/granary/q.yaml",
  // "etcd:127.0.0.1:2379/granary/c1/tenant_quota_policy").
  virtual std::string Describe() const = 0;
};

// YAML file at `path`.
std::unique_ptr<PolicyStore> NewFilePolicyStore(const std::string& path);

// With HA, only the active master may write the policy: Save becomes a txn that compares
// CREATE(view_key) with the master's epoch. epoch() returns the epoch this master leads in, or
// 0 when it does not lead (Save then refuses without asking etcd); a failed compare calls
// on_lost() (the master fences itself). Both are called without any lock of the store's held.
// Save's refusals are UNAVAILABLE with ErrorReason::kNotActive.
struct WriteGuard {
  std::string view_key;  // "granary/<cluster_id>/master_view"; empty: no guard
  std::function<int64_t()> epoch;
  std::function<void()> on_lost;
};

// etcd v3 (through its JSON gateway, /v3/kv/...) at `endpoints` ("host:port[,host:port...]"),
// key "granary/<cluster_id>/tenant_quota_policy". The value is the policy YAML.
// Requests time out after `timeout_ms`; the next endpoint is tried on failure.
[[nodiscard]] absl::StatusOr<std::unique_ptr<PolicyStore>> NewEtcdPolicyStore(
    const std::string& endpoints, const std::string& cluster_id, int timeout_ms = 2000,
    WriteGuard guard = {});

}  // namespace granary::master::tenant
