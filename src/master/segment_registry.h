#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "master/offset_allocator.h"
#include "master/placement.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"

namespace granary::master {

// One replica's place in a segment.
struct Placement {
  uint64_t segment_id = 0;
  uint64_t offset = 0;
  uint64_t size = 0;          // bytes reserved (header + value, rounded to alignment)
  uint32_t alloc_handle = 0;  // the segment allocator's name for it (OffsetAllocator::Free)
};
// One placement inline (replica_num 1, the common case: 40 bytes in each Object); more go to
// the heap.
using Placements = absl::InlinedVector<Placement, 1>;

// The mounted segments and their allocators. Placement picks `replicas` segments on distinct
// nodes among those the PlacementRequest allows (placement.h decides which), starting at a
// rotating position so that load spreads. Thread-safe (one mutex, a leaf: no other lock is taken
// under it; every call is O(segments) at most, and Allocate/Free are O(1) per segment).
class SegmentRegistry {
 public:
  SegmentRegistry();
  struct Totals {
    uint64_t capacity = 0;
    uint64_t used = 0;  // held by objects and puts (quarantined space is not "used")
    // Out of allocation for a while: unreported space of re-mounted segments, and the space of
    // aborted puts and copies held against their late writes (FreeLater).
    uint64_t quarantined = 0;
    size_t segments = 0;
  };

  // Registers a segment owned by `session`. Rejects overlapping names on one node. A resumed
  // segment (req.resumed: it may hold objects of a previous master session) is *restoring*:
  // nothing is allocated in it until FinishRestore, or until restore_deadline_ms passes
  // (Expire), so that no new put lands on an object its node is still reporting.
  // A resumed segment's unreported space is quarantined (FinishRestore) until the later of
  // SetQuarantineUntil's time and `quarantine_until_ms`: a node that re-mounts after a
  // partition may still receive late writes granted before the master dropped it.
  [[nodiscard]] absl::StatusOr<uint64_t> Mount(const proto::MountSegmentRequest& req,
                                               uint64_t session,
                                               int64_t restore_deadline_ms = INT64_MAX,
                                               int64_t quarantine_until_ms = 0);
  // Space of restoring segments that no inventory reported stays out of allocation until this
  // time (the master's start + the write window + a margin; 0: no quarantine). Set once, before
  // anything mounts.
  void SetQuarantineUntil(int64_t ms);
  int64_t quarantine_until() const {
    granary::common::MutexLock lock(&mu_);
    return quarantine_until_ms_;
  }

  // --- Restore (a master rebuilding from node inventories).
  struct Range {
    uint64_t segment_id = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  // Reserves each range [offset, offset + size) of a segment that `session` mounted (the range
  // a reported object occupies), in turn, under one lock: out[i] is ranges[i]'s outcome.
  // INVALID_ARGUMENT for a segment that is not the session's, or a range that is outside it or
  // unaligned; FAILED_PRECONDITION when part of it is already taken.
  void ReserveAll(uint64_t session, const std::vector<Range>& ranges,
                  std::vector<absl::StatusOr<Placement>>* out);
  // The segment's report is complete: it is allocatable, and if now_ms is before the quarantine
  // end, every range still free is quarantined until then. Returns the bytes quarantined.
  uint64_t FinishRestore(uint64_t segment_id, int64_t now_ms);
  // Ends the restore of segments past their deadline (as FinishRestore) and gives quarantined
  // space back once the quarantine has ended, and held space (FreeLater) once its time has
  // come. Returns the bytes given back. Once per tick.
  uint64_t Expire(int64_t now_ms);
  // Whether a segment `who` may use is restoring or holds quarantined space: a put that finds no
  // room then gets UNAVAILABLE (retry), not an eviction of restored objects.
  bool Fenced(const PlacementRequest& who) const;
  // Removes a segment; its space vanishes with it. Returns false if unknown.
  bool Unmount(uint64_t segment_id);
  // Segment ids owned by a session (a node).
  std::vector<uint64_t> SegmentsOf(uint64_t session) const;

  // Reserves `bytes` on `replicas` distinct nodes, on segments `who` may use. RESOURCE_EXHAUSTED
  // when not possible, with what was missing in the message.
  [[nodiscard]] absl::StatusOr<Placements> Allocate(const PlacementRequest& who, uint64_t bytes,
                                                    int replicas);
  // Reserves `bytes` on a segment `who` may use of the node named by `target` (its node id or
  // its host:port address), unless that node already holds one of `existing`. NOT_FOUND for an
  // unknown node, FAILED_PRECONDITION when it already holds a replica or has no segment `who`
  // may use (another tenant's pool), RESOURCE_EXHAUSTED when full.
  [[nodiscard]] absl::StatusOr<Placement> AllocateOn(const std::string& target,
                                                     const PlacementRequest& who, uint64_t bytes,
                                                     const Placements& existing);
  // The mounted segment with this id.
  std::optional<proto::SegmentInfo> Find(uint64_t segment_id) const;
  // Frees placements at `at_ms` (Expire) rather than now: the space of a put or copy that was
  // aborted while its writes may still be on the way (a tcp retransmission after a link comes
  // back lands seconds later), so that they never land on an object allocated there meanwhile.
  // Held space counts as quarantined; a placement on a segment that is gone is ignored.
  void FreeLater(const Placements& ps, int64_t at_ms);
  // FreeLater for hold_ms from now_ms; at once when hold_ms is 0.
  void FreeAfter(const Placements& ps, int64_t now_ms, int64_t hold_ms) {
    if (hold_ms <= 0) {
      Free(ps);
    } else {
      FreeLater(ps, now_ms + hold_ms);
    }
  }
  // Frees a placement; a placement on a segment that is gone is ignored.
  void Free(const Placement& p);
  void Free(const Placements& ps) {
    for (const auto& p : ps) Free(p);
  }
  // Free of an evicted object's placements (one object: every replica sits on one tier), also
  // counted in Evicted() of the tier of its first placement that is still mounted.
  void FreeEvicted(const Placements& ps);
  struct Evictions {
    uint64_t objects = 0;
    uint64_t bytes = 0;  // placed bytes, every replica
  };
  // What eviction freed on a tier since this registry started.
  Evictions Evicted(proto::Tier tier) const;

  // Remote address of a placement (segment base + offset), or nullopt if the segment is gone.
  std::optional<uint64_t> AddressOf(const Placement& p) const;
  // The replica descriptors of placements whose segments are still mounted (one lock).
  std::vector<proto::ReplicaDesc> Describe(const Placements& ps) const;
  // Every mounted segment (statistics: what the nodes lent).
  Totals totals() const;
  // The same over the segments of one tier (every pool).
  Totals totals(proto::Tier tier) const;
  // The segments `who` may use: SharedCapacity(tier) for what Puts fill (the watermark, fair
  // share and quota scaling).
  Totals CapacityOf(const PlacementRequest& who) const;
  // The nodes with a segment `who` may use whose aligned size holds `aligned_bytes`.
  size_t NodesThatHold(const PlacementRequest& who, uint64_t aligned_bytes) const;
  std::vector<proto::SegmentInfo> List() const;

  // --- Pools (placement.h).
  struct PoolState {
    bool mounted = false;  // a segment of the tenant's pool (of the tier) is mounted now
    bool seen = false;     // one was mounted since this registry started (it may be down now)
  };
  PoolState PoolOf(absl::string_view tenant, proto::Tier tier) const;
  // The ids of the segments `who` may use, or nullopt when that is every mounted segment (no
  // filter needed: eviction then scans without one).
  std::optional<absl::flat_hash_set<uint64_t>> SegmentIdsFor(const PlacementRequest& who) const;
  struct PoolTotals {
    std::string tenant;
    Totals totals;  // every tier
  };
  // The mounted pools, by tenant (sorted).
  std::vector<PoolTotals> Pools() const;
  // Bytes of free space in the largest free block over all segments, and mean fragmentation.
  double MeanFragmentation() const;

 private:
  struct Segment {
    proto::SegmentInfo info;
    uint64_t session = 0;
    std::unique_ptr<OffsetAllocator> alloc;
    bool restoring = false;  // resumed, its inventory not yet complete: not allocatable
    int64_t restore_deadline_ms = INT64_MAX;
    // Until max(quarantine_until_ms_, this), for a resumed segment.
    int64_t quarantine_until_ms = 0;
    std::vector<OffsetAllocator::Allocation> quarantine;  // until QuarantineEndLocked
    uint64_t quarantined = 0;
    // FreeLater: (free at, what), in the order they were held; aborts are rare, a few entries.
    std::vector<std::pair<int64_t, OffsetAllocator::Allocation>> held;
    uint64_t held_bytes = 0;
  };
  uint64_t FinishRestoreLocked(Segment& s, int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One range of ReserveAll; *last caches the segment of the previous call (null: none).
  absl::StatusOr<Placement> ReserveLocked(uint64_t segment_id, uint64_t session, uint64_t offset,
                                          uint64_t size, Segment** last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t QuarantineEndLocked(const Segment& s) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return std::max(quarantine_until_ms_, s.quarantine_until_ms);
  }
  // Adds one segment's figures to `t`.
  void AddLocked(const Segment& s, Totals* t) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  int64_t quarantine_until_ms_ ABSL_GUARDED_BY(mu_) = 0;
  mutable granary::common::Mutex mu_;
  Evictions evicted_[std::size(proto::kTiers)] ABSL_GUARDED_BY(mu_);  // by proto::Tier
  std::map<uint64_t, Segment> segments_ ABSL_GUARDED_BY(mu_);
  // Segment ids are never reused, not even across master restarts (clients cache descriptors
  // by id): they start from the wall clock in milliseconds, shifted.
  uint64_t next_id_ ABSL_GUARDED_BY(mu_);
  size_t rotor_ ABSL_GUARDED_BY(mu_) = 0;
  // "tenant\0tier" of every pool mounted since start (PoolState::seen). Grows with the pools
  // an operator starts: a few names.
  absl::flat_hash_set<std::string> pools_seen_ ABSL_GUARDED_BY(mu_);
  // segments_ in id order (std::map keeps the Segments in place), rebuilt on Mount and
  // Unmount, so that Allocate does not build it per call.
  std::vector<Segment*> order_ ABSL_GUARDED_BY(mu_);
  void RebuildOrderLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace granary::master
