#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "proto/messages.h"

namespace granary::master {

// The master's one placement rule: which segments a (tenant, tier) may use, for what. Every
// caller that picks, counts or scans segments asks it (SegmentRegistry::Allocate, AllocateOn
// and CapacityOf; the space-eviction checks; quota scaling and the watermark), so a new tier or
// a change to pools is made here once.
//
// A segment mounted with `pool = T` (granary_node --pool=T) is tenant T's dedicated pool; one
// with no pool is shared. No other tenant's bytes ever land on T's pool:
//   - a Put of a tenant with a pool goes to its pool (Pool); it goes to shared segments (Put)
//     only when the pool is full and its policy says `pool_spill: true` (PutRoute). A tenant
//     without a pool puts on shared segments;
//   - a Copy or Move of tenant X lands on X's own pool, or on a shared segment of the tier
//     unless X has a pool and may not spill; never on another tenant's pool;
//   - the shared capacity of a tier (eviction watermark, fair share, quota scaling) counts the
//     shared segments of that tier only; each pool's capacity is its tenant's (PoolCapacity).
//
// A value type, a few bytes; Allows is a couple of compares (called per segment visited under
// the registry's lock on PutStart). The tenant is not copied: the viewed string must outlive the
// request (callers build it on the stack from a tenant they hold). Immutable, so thread-safe.
class PlacementRequest {
 public:
  enum class Purpose : uint8_t {
    kPut,             // a new object's replicas on shared segments
    kPool,            // a new object's replicas in the tenant's own pool
    kCopy,            // the destination of a Copy or Move
    kSharedCapacity,  // counting the capacity shared Puts place into (no tenant)
  };

  static PlacementRequest Put(absl::string_view tenant, proto::Tier tier) {
    return PlacementRequest(Purpose::kPut, tenant, tier, /*shared=*/true);
  }
  static PlacementRequest Pool(absl::string_view tenant, proto::Tier tier) {
    return PlacementRequest(Purpose::kPool, tenant, tier, /*shared=*/false);
  }
  // `shared`: whether shared segments may take the copy (false for a tenant confined to its
  // pool: it has one and its policy does not allow pool_spill).
  static PlacementRequest Copy(absl::string_view tenant, proto::Tier tier, bool shared = true) {
    return PlacementRequest(Purpose::kCopy, tenant, tier, shared);
  }
  static PlacementRequest SharedCapacity(proto::Tier tier) {
    return PlacementRequest(Purpose::kSharedCapacity, {}, tier, /*shared=*/true);
  }
  // The segments of tenant's pool: what it holds, for the admin API and the metrics.
  static PlacementRequest PoolCapacity(absl::string_view tenant, proto::Tier tier) {
    return Pool(tenant, tier);
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
  PlacementRequest(Purpose purpose, absl::string_view tenant, proto::Tier tier, bool shared)
      : purpose_(purpose), tenant_(tenant), tier_(tier), shared_(shared) {}

  Purpose purpose_;
  absl::string_view tenant_;
  proto::Tier tier_;
  bool shared_;  // shared segments serve it
};

// Where a Put of a tenant goes, in order (placement.h's rule; the Evictor runs it):
//   - no pool (none mounted, none seen since the master started): shared segments, evicting
//     globally when full;
//   - a pool mounted: the pool; when it is full, shared segments if pool_spill (evicting
//     globally there), and last the tenant's own least recently used objects in the pool;
//   - a pool seen but none mounted now (its node is down or restarting): shared segments if
//     pool_spill, else UNAVAILABLE: the tenant's bytes never fall back to shared memory that
//     other tenants' read keys cover.
struct PutRoute {
  bool pool = false;        // try the pool first
  bool shared = false;      // then shared segments
  bool pool_evict = false;  // then evict the tenant's own objects in the pool
  bool pool_down = false;   // nowhere to go: the pool is gone and spilling is not allowed

  static PutRoute For(bool pool_mounted, bool pool_seen, bool pool_spill);
};

// The tier's name as operators write it ("host", "gpu").
const char* TierName(proto::Tier tier);

}  // namespace granary::master
