#pragma once

// MasterFixture (master_fixture.h) with tenant quotas on, for the tests of quota admission in the
// master: a policy set straight on the ledger, tenant snapshots, and per-tenant eviction counts.
// Nothing expires unless a test says so, and a put is one standard 64 KiB object by default.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "master/master_service.h"
#include "master/tenant/policy.h"
#include "master/tenant/quota_ledger.h"
#include "tests/unit/master/master_fixture.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {

class QuotaFixture : public MasterFixture {
 protected:
  static constexpr uint64_t kObj = 64 * kKiB;  // allocation of the standard test object
  static constexpr uint64_t kObjValue = ValueFor(kObj);

  QuotaFixture() {
    opts_.enable_multi_tenants = true;
    opts_.client_ttl_ms = 3'600'000;  // nothing expires unless a test says so
    opts_.put_start_timeout_ms = 600'000;
  }

  // Replaces the policy: {name, quota bytes} pairs.
  void SetPolicy(const std::vector<std::pair<std::string, uint64_t>>& tenants) {
    tenant::Policy p;
    for (const auto& [name, quota] : tenants) p.tenants.push_back({name, quota, std::nullopt});
    std::sort(p.tenants.begin(), p.tenants.end(),
              [](const tenant::TenantPolicy& a, const tenant::TenantPolicy& b) {
                return a.name < b.name;
              });
    svc().ledger()->ApplyPolicy(p, svc().capacity());
  }

  tenant::TenantSnapshot Snap(const std::string& tenant) {
    auto s = svc().ledger()->Snapshot(tenant);
    EXPECT_TRUE(s.has_value()) << "no account for " << tenant;
    return s.value_or(tenant::TenantSnapshot{});
  }

  // PutStart + PutEnd of a standard object unless `size` says otherwise; returns the generation.
  uint64_t Put(SessionId sid, const std::string& key, uint64_t size = kObjValue, int replicas = 1) {
    return MasterFixture::Put(sid, key, size, replicas);
  }

  bool Exists(SessionId sid, const std::string& key) {
    return test_calls::Code(Exist(sid, key)) == absl::StatusCode::kOk;
  }

  uint64_t Evictions(const std::string& tenant, const std::string& reason) {
    return metrics_
        .Counter("granary_tenant_evictions_total", "", {{"tenant_id", tenant}, {"reason", reason}})
        ->value();
  }
};

}  // namespace granary::master
