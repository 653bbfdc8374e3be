#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/tier_preference.h"

namespace granary::master {

// The admin API's PUT /api/v1/tenant_quotas body.
struct QuotaBody {
  uint64_t quota = 0;
  std::optional<uint64_t> max_entries;  // absent or null: none
  std::optional<bool> pool_spill;       // absent: the tenant keeps what it has (false if new)
  std::optional<common::TierPreference>
      default_tier;  // absent: the tenant keeps its own (host if new)
};

// Parses {"requested_quota_bytes": N, "max_entries": M?, "pool_spill": B?, "default_tier": T?}.
// N (and M, when present and not null) must be integers in 1..2^63-1; B true or false; T
// "host", "gpu" or "any". Unknown fields,
// non-objects and malformed JSON are INVALID_ARGUMENT naming the bad field and value. Parsed
// strictly: a key given twice ("duplicate key 'max_entries'"), an integer past 64 bits and
// nesting deeper than 32 are refused too. Messages are valid UTF-8 whatever the body held.
[[nodiscard]] absl::StatusOr<QuotaBody> ParseQuotaBody(const std::string& body);

}  // namespace granary::master
