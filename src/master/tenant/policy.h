#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tier_preference.h"

namespace granary::master::tenant {

// One tenant's entry in the quota policy.
struct TenantPolicy {
  std::string name;
  uint64_t quota_bytes = 0;             // requested byte quota (> 0)
  std::optional<uint64_t> max_entries;  // optional entry-count quota (> 0)
  // Optional client credential: SHA-256 of the tenant's token as 64 lowercase hex characters
  // (the master never stores tokens). When set, a client hello for this tenant must carry a
  // token that hashes to it. Empty: no token is expected (unless --require_tenant_tokens).
  std::string token_sha256;
  // With a pool of its own (a node started with --pool=<name>): whether its puts may go to
  // shared segments once the pool is full. false: they stay in the pool (evicting the tenant's
  // own oldest objects there) and fail when nothing can be evicted, so its bytes never sit in
  // memory that other tenants' read keys cover. No effect without a pool.
  bool pool_spill = false;
  // Where its puts go when the client names no tier (PutOptions::tier kTenantDefault, and every
  // put of the Python and Mooncake layers): host, gpu, any or disk (common/tier_preference.h).
  common::TierPreference default_tier = common::TierPreference::kHost;
  bool operator==(const TenantPolicy&) const = default;
};

// The whole policy (YAML schema version 1, docs/architecture.md section 5):
//   version: 1
//   tenants:
//     - name: tenant-a
//       quota: 200GB          # positive integer, optional unit B, KB, MB, GB, TB (1 KB = 1024 B)
//       max_entries: 200000   # optional
//       token_sha256: ba78…ad # optional: sha256 of the client token, 64 hex characters
//       pool_spill: false     # optional, default false: see TenantPolicy::pool_spill
//       default_tier: host    # optional, default host: host, gpu, any or disk
// Tenants are kept sorted by name.
struct Policy {
  std::vector<TenantPolicy> tenants;
  const TenantPolicy* Find(absl::string_view name) const;
  bool operator==(const Policy&) const = default;
};

// The tenant-id rules, the same at every entry point (policy, admin API, client hello):
// non-empty, at most 128 bytes, no leading '_' (reserved for the master), no NUL or control
// characters, valid UTF-8 (ids are shown in JSON and metric labels). The error names the rule
// and the id, with control and non-UTF-8 bytes escaped (\xNN).
[[nodiscard]] absl::Status ValidateTenantId(absl::string_view id);

// Checks a SHA-256 given as hex (policy `token_sha256`, the master's --tenant_tokens_file) and
// returns it in lowercase: exactly 64 hex digits, either case (so `sha256sum` output and
// tools that print upper case both work). INVALID_ARGUMENT saying what is wrong and showing
// the value (a hash, not a secret) otherwise.
[[nodiscard]] absl::StatusOr<std::string> NormalizeTokenSha256(absl::string_view hex);

// Parses and validates a policy document. INVALID_ARGUMENT naming the tenant (or its index)
// and the field for: a version other than 1; a bad, duplicated or reserved name; a quota that
// is not a positive integer with an optional unit or that overflows 2^63-1; a max_entries that
// is not a positive integer; a token_sha256 that is not 64 hex digits (upper case is accepted
// and stored lower case); a pool_spill that is not true or false; a default_tier that is not
// host, gpu, any or disk; unknown keys at any level; YAML
// syntax errors (with line). An empty document is an error; `tenants: []` is an empty policy.
[[nodiscard]] absl::StatusOr<Policy> ParsePolicy(absl::string_view yaml);

// Serializes a policy to YAML that ParsePolicy reads back to an equal Policy. Quotas are
// written as plain byte counts; token_sha256 is written when set, pool_spill when true,
// default_tier when it is not host.
std::string SerializePolicy(const Policy& policy);

}  // namespace granary::master::tenant
