#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace granary::master {

// Parses the admin API's PUT /api/v1/tenant_quotas body:
//   {"requested_quota_bytes": N, "max_entries": M?}
// N (and M, when present and not null) must be integers in 1..2^63-1. Unknown fields,
// non-objects and malformed JSON are INVALID_ARGUMENT naming the bad field. On error the
// outputs may be partially written; callers use them only on OK.
[[nodiscard]] absl::Status ParseQuotaBody(const std::string& body, uint64_t* quota,
                                          std::optional<uint64_t>* max_entries);

}  // namespace granary::master
