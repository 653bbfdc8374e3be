#pragma once

// Helpers shared by the QuotaLedger tests (quota_ledger_test, quota_ledger_concurrency_test): a
// policy from {tenant, quota} pairs, and a tenant's snapshot that must exist.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "master/tenant/policy.h"
#include "master/tenant/quota_ledger.h"

namespace granary::master::tenant {

inline constexpr uint64_t kBig = uint64_t{1} << 40;

inline Policy MakePolicy(std::vector<std::pair<std::string, uint64_t>> quotas) {
  std::sort(quotas.begin(), quotas.end());
  Policy p;
  for (auto& [name, bytes] : quotas) p.tenants.push_back(TenantPolicy{name, bytes, std::nullopt});
  return p;
}

inline TenantSnapshot Snap(const QuotaLedger& ledger, absl::string_view tenant) {
  std::optional<TenantSnapshot> s = ledger.Snapshot(tenant);
  EXPECT_TRUE(s.has_value()) << "no account for " << tenant;
  return s.value_or(TenantSnapshot{});
}

}  // namespace granary::master::tenant
