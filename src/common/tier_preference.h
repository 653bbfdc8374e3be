#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace granary::common {

// Where a put's replicas may go (PutOptions::tier on the client, a tenant's `default_tier` in
// the policy). Every replica of one object sits on one tier.
enum class TierPreference : uint8_t {
  kHost = 0,  // host-memory segments only
  kGpu = 1,   // GPU segments only
  kAny = 2,   // GPU segments while they have room without evicting, else host segments
  kDisk = 3,  // the nodes' disk tiers only (granary_node --disk_path)
};

// "host", "gpu", "any", "disk".
absl::string_view TierPreferenceName(TierPreference t);

// The inverse of TierPreferenceName (exact, lower case). INVALID_ARGUMENT naming the value and
// the accepted ones otherwise.
[[nodiscard]] absl::StatusOr<TierPreference> ParseTierPreference(absl::string_view text);

}  // namespace granary::common
