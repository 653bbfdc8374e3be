#pragma once

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_set.h"
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
  Evictor(const MasterOptions& options, common::Clock* clock, common::MetricsRegistry* metrics,
          MasterCounters* counters, ObjectShards* shards, SegmentRegistry* segments,
          tenant::QuotaLedger* ledger);

  // Frees `bytes` (at least) by evicting least-recently-used complete, unleased objects;
  // tenants over quota or closed to admission first. Returns the bytes freed.
  uint64_t Evict(uint64_t bytes, const char* reason) {
    return EvictObjects(bytes, reason, nullptr);
  }
  // For each tier: above the high watermark of its shared capacity, evicts eviction_ratio of
  // it among the objects on that tier's shared segments.
  void EvictAboveWatermark();

  // Charges a tenant; over its quota, evicts the tenant's own oldest objects and retries, at
  // most twice.
  [[nodiscard]] absl::Status ChargeWithTenantEviction(const std::string& tenant, uint64_t bytes);
  // SegmentRegistry::Allocate; when full, evicts (at most twice) if that could help, among the
  // objects with a replica on a segment `who` may use (objects only in pools are never evicted
  // for a shared put).
  [[nodiscard]] absl::StatusOr<Placements> AllocateWithEviction(const PlacementRequest& who,
                                                                uint64_t bytes, int replicas);
  // A new object's replicas for `tenant` on the tier(s) `tier` names, along its PutRoute
  // (placement.h) on each: its pool when it has one, shared segments when it has none or may
  // spill (pool_spill), and last its own least recently used objects in the pool evicted.
  // RESOURCE_EXHAUSTED naming the pool when the pool is full, it may not spill and nothing of
  // it can be evicted there; UNAVAILABLE when its pool is down and it may not spill. kAny: the
  // GPU tier when it has room without evicting, else the host tier (evicting there); the error
  // names both tiers.
  [[nodiscard]] absl::StatusOr<Placements> AllocateForPut(const std::string& tenant,
                                                          bool pool_spill,
                                                          common::TierPreference tier,
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
  // When `on` is set, only objects with a replica on one of those segments are candidates;
  // `tier` is the tier whose shared capacity sets each tenant's fair share.
  uint64_t EvictObjects(uint64_t bytes, const char* reason, const std::string* only_tenant,
                        uint64_t max_objects = UINT64_MAX,
                        const absl::flat_hash_set<uint64_t>* on = nullptr,
                        proto::Tier tier = proto::Tier::kHost);
  // AllocateForPut on one tier; without `evict`, nothing is evicted (the first try of kAny).
  [[nodiscard]] absl::StatusOr<Placements> AllocateOnTier(const std::string& tenant,
                                                          bool pool_spill, proto::Tier tier,
                                                          uint64_t bytes, int replicas, bool evict);
  // Allocation failed with `allocated`: UNAVAILABLE when the space `who` may use is fenced
  // after a restart, RESOURCE_EXHAUSTED when no eviction could make room; OK otherwise.
  [[nodiscard]] absl::Status CheckEvictionHelps(const PlacementRequest& who, uint64_t bytes,
                                                int replicas, const absl::Status& allocated) const;
  // The tenant's pool, evicting its own least recently used objects there (at most twice).
  [[nodiscard]] absl::StatusOr<Placements> AllocateInPool(const std::string& tenant,
                                                          proto::Tier tier, uint64_t bytes,
                                                          int replicas);
  // A pool's RESOURCE_EXHAUSTED, reworded to name the pool and say why nothing spilled.
  static absl::Status PoolError(const std::string& tenant, const absl::Status& st);
  // Erases the object a scan saw in (shard, slot) if it is still that object and still
  // evictable; returns its placements (empty when it is not).
  Placements TakeVictim(uint32_t shard, uint32_t slot, uint64_t last_access, int64_t now);

  const MasterOptions& options_;
  common::Clock* clock_;
  common::MetricsRegistry* metrics_;
  MasterCounters* counters_;
  ObjectShards* shards_;
  SegmentRegistry* segments_;
  tenant::QuotaLedger* ledger_;
  granary::common::Mutex round_mu_;  // one eviction round at a time; guards no data
};

}  // namespace granary::master
