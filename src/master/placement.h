#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "proto/messages.h"

namespace granary::master {

// The master's one placement rule: which segments a (tenant, tier) may use, for what. Every
// caller that picks, counts or scans segments asks it (SegmentRegistry::Allocate, AllocateOn
// and CapacityOf; the space-eviction check; quota scaling and the watermark), so a new tier or
// a change to pools is made here once.
//
// A segment mounted with `pool = T` (granary_node --pool=T) is tenant T's dedicated pool; one
// with no pool is shared. Today:
//   - a Put by any tenant places only on shared segments of the requested tier (nothing is
//     placed on pools yet: placing into pools and pool_spill come later);
//   - a Copy or Move of tenant X lands on a shared segment of the tier or on X's own pool, never
//     on another tenant's pool;
//   - the shared capacity of a tier (eviction watermark, fair share, quota scaling) counts the
//     shared segments of that tier only, as that is all a Put can fill.
//
// A value type, a few bytes; Allows is a couple of compares (called per segment visited under
// the registry's lock on PutStart). The tenant is not copied: the viewed string must outlive the
// request (callers build it on the stack from a tenant they hold). Immutable, so thread-safe.
class PlacementRequest {
 public:
  enum class Purpose : uint8_t {
    kPut,             // a new object's replicas
    kCopy,            // the destination of a Copy or Move
    kSharedCapacity,  // counting the capacity Puts place into (no tenant)
  };

  static PlacementRequest Put(absl::string_view tenant, proto::Tier tier) {
    return PlacementRequest(Purpose::kPut, tenant, tier);
  }
  static PlacementRequest Copy(absl::string_view tenant, proto::Tier tier) {
    return PlacementRequest(Purpose::kCopy, tenant, tier);
  }
  static PlacementRequest SharedCapacity(proto::Tier tier) {
    return PlacementRequest(Purpose::kSharedCapacity, {}, tier);
  }

  // Whether a segment of this tier and pool may serve the request.
  bool Allows(proto::Tier segment_tier, absl::string_view segment_pool) const;
  bool Allows(const proto::SegmentInfo& s) const { return Allows(s.tier, s.pool); }

  // For error messages: "tenant 'acme' (host tier, put)".
  std::string ToString() const;

  Purpose purpose() const { return purpose_; }
  absl::string_view tenant() const { return tenant_; }
  proto::Tier tier() const { return tier_; }

 private:
  PlacementRequest(Purpose purpose, absl::string_view tenant, proto::Tier tier)
      : purpose_(purpose), tenant_(tenant), tier_(tier) {}

  Purpose purpose_;
  absl::string_view tenant_;
  proto::Tier tier_;
};

// The tier's name as operators write it ("host", "gpu").
const char* TierName(proto::Tier tier);

}  // namespace granary::master
