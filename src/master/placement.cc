#include "master/placement.h"

#include "absl/strings/str_cat.h"

namespace granary::master {

bool PlacementRequest::Allows(proto::Tier segment_tier, absl::string_view segment_pool) const {
  if (segment_tier != tier_) return false;
  if (segment_pool.empty()) return shared_;
  switch (purpose_) {
    case Purpose::kPut:
    case Purpose::kSharedCapacity:
      return false;  // another tenant's pool, or a pool at all: never shared space
    case Purpose::kPool:
    case Purpose::kCopy:
      return segment_pool == tenant_;  // the tenant's own pool, never another's
  }
  return false;
}

std::string PlacementRequest::ToString() const {
  const char* what = "shared capacity";
  switch (purpose_) {
    case Purpose::kPut:
      what = "put";
      break;
    case Purpose::kPool:
      what = "put in its pool";
      break;
    case Purpose::kCopy:
      what = shared_ ? "copy" : "copy, confined to its pool";
      break;
    case Purpose::kSharedCapacity:
      return absl::StrCat(TierName(tier_), " tier, ", what);
  }
  return absl::StrCat("tenant '", tenant_, "' (", TierName(tier_), " tier, ", what, ")");
}

PutRoute PutRoute::For(bool pool_mounted, bool pool_seen, bool pool_spill) {
  PutRoute r;
  if (pool_mounted) {
    r.pool = true;
    r.shared = pool_spill;
    r.pool_evict = true;
  } else if (!pool_seen || pool_spill) {
    r.shared = true;
  } else {
    r.pool_down = true;
  }
  return r;
}

const char* TierName(proto::Tier tier) {
  switch (tier) {
    case proto::Tier::kHost:
      return "host";
    case proto::Tier::kGpu:
      return "gpu";
    case proto::Tier::kDisk:
      return "disk";
  }
  return "unknown";
}

}  // namespace granary::master
