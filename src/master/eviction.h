#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "master/master_metrics.h"
#include "master/master_options.h"
#include "master/object_shards.h"
#include "master/placement.h"
#include "master/segment_registry.h"
#include "master/tenant/quota_ledger.h"

namespace granary::master {

// Eviction: frees space by dropping least-recently-used complete, unleased objects, fairly
// between tenants (docs/architecture.md section 4), and the admission paths that evict before they
// give up: a tenant over its byte quota or max_entries loses its own oldest objects, and a Put that
// finds no space evicts globally when that could help.
//
// Owned by MasterService; every pointer given to the constructor must outlive it. Thread-safe:
// one eviction round at a time (round_mu_, taken first: a round then takes each shard's mutex
// in turn, and the registry's and the ledger's under a shard's). Callers hold no master lock.
// A round scans every shard (O(objects)); Charge and Allocate cost one ledger or registry call
// when nothing needs evicting.
class Evictor {
 public:
  Evictor(const MasterOptions& options, Clock* clock, MetricsRegistry* metrics,
          MasterCounters* counters, ObjectShards* shards, SegmentRegistry* segments,
          tenant::QuotaLedger* ledger);

  // Frees `bytes` (at least) by evicting least-recently-used complete, unleased objects;
  // tenants over quota or closed to admission first. Returns the bytes freed.
  uint64_t Evict(uint64_t bytes, const char* reason) {
    return EvictObjects(bytes, reason, nullptr);
  }
  // Above the high watermark of the shared host capacity, evicts eviction_ratio of it.
  void EvictAboveWatermark();

  // Charges a tenant; over its quota, evicts the tenant's own oldest objects and retries, at
  // most twice.
  [[nodiscard]] absl::Status ChargeWithTenantEviction(const std::string& tenant, uint64_t bytes);
  // SegmentRegistry::Allocate; when full, evicts globally (at most twice) if that could help.
  [[nodiscard]] absl::StatusOr<Placements> AllocateWithEviction(const PlacementRequest& who,
                                                                uint64_t bytes, int replicas);
  // After a commit: a tenant past its max_entries loses its oldest entries (never rejected).
  void EnforceMaxEntries(const std::string& tenant);

  // The shared capacity of a tier (placement.h): what Puts fill.
  SegmentRegistry::Totals SharedCapacity(proto::Tier tier) const {
    return segments_->CapacityOf(PlacementRequest::SharedCapacity(tier));
  }

 private:
  // What one eviction round for a single tenant frees at least, of a cap (its byte quota or
  // max_entries): eviction_ratio of it, rounded down. Such a round scans every shard, so a
  // tenant at its cap pays the scan once per that many bytes or entries written, not on every
  // put (a tenant at a 200k max_entries wrote 5.4k keys/s); a cap too small for a whole unit
  // keeps exact eviction.
  uint64_t TenantRound(uint64_t cap) const;
  // Evict, limited to one tenant's objects when only_tenant is set; stops after `bytes` or
  // `max_objects`, whichever comes first.
  uint64_t EvictObjects(uint64_t bytes, const char* reason, const std::string* only_tenant,
                        uint64_t max_objects = UINT64_MAX);
  // Erases the object a scan saw in (shard, slot) if it is still that object and still
  // evictable; returns its placements (empty when it is not).
  Placements TakeVictim(uint32_t shard, uint32_t slot, uint64_t last_access, int64_t now);

  const MasterOptions& options_;
  Clock* clock_;
  MetricsRegistry* metrics_;
  MasterCounters* counters_;
  ObjectShards* shards_;
  SegmentRegistry* segments_;
  tenant::QuotaLedger* ledger_;
  granary::Mutex round_mu_;  // one eviction round at a time; guards no data
};

}  // namespace granary::master
