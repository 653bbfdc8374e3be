#include "master/placement.h"

#include "absl/strings/str_cat.h"

namespace granary::master {

bool PlacementRequest::Allows(proto::Tier segment_tier, absl::string_view segment_pool) const {
  if (segment_tier != tier_) return false;
  if (segment_pool.empty()) return true;  // shared segments serve every purpose
  switch (purpose_) {
    case Purpose::kPut:
      return false;  // nothing is placed on pools yet
    case Purpose::kCopy:
      return segment_pool == tenant_;  // the tenant's own pool, never another's
    case Purpose::kSharedCapacity:
      return false;
  }
  return false;
}

std::string PlacementRequest::ToString() const {
  const char* what = purpose_ == Purpose::kPut    ? "put"
                     : purpose_ == Purpose::kCopy ? "copy"
                                                  : "shared capacity";
  if (purpose_ == Purpose::kSharedCapacity) return absl::StrCat(TierName(tier_), " tier, ", what);
  return absl::StrCat("tenant '", tenant_, "' (", TierName(tier_), " tier, ", what, ")");
}

const char* TierName(proto::Tier tier) {
  switch (tier) {
    case proto::Tier::kHost:
      return "host";
    case proto::Tier::kGpu:
      return "gpu";
  }
  return "unknown";
}

}  // namespace granary::master
