#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "master/eviction.h"
#include "master/master_options.h"
#include "master/object_shards.h"
#include "master/segment_registry.h"
#include "master/tenant/quota_ledger.h"
#include "master/timer_wheel.h"
#include "proto/messages.h"

namespace granary::master {

// Copy and Move coordination: a replica added on a chosen node, on its host tier (read
// one-sided from a host-tier source, or pushed by the node of a GPU-tier one, client-driven);
// Move drops the source at MoveEnd. The destination is placed where the tenant may place a copy
// (placement.h: shared segments or its own pool) and its bytes are charged at start and
// committed at end; revoke, the deadline and the session's death refund them. The object is
// leased while the copy is in flight, so neither eviction nor Remove takes it.
//
// Owned by MasterService; every pointer given to the constructor must outlive it. Thread-safe.
// Locks: mu_ (the copies in flight) may be taken under a shard's mutex, and is released before
// the registry or the ledger is called; no lock is held while calling the Evictor or the
// TimerWheel.
class CopyCoordinator {
 public:
  // Deadlines of copies live in the shared TimerWheel under the table key prefixed with this
  // (tenant ids cannot contain control characters, so no table key starts with it).
  static constexpr char kDeadlineTag = '\x01';

  CopyCoordinator(const MasterOptions& options, common::Clock* clock, ObjectShards* shards,
                  SegmentRegistry* segments, tenant::QuotaLedger* ledger, TimerWheel* deadlines,
                  Evictor* evictor);

  proto::CopyStartReply CopyStart(SessionId sid, const std::string& tenant,
                                  const proto::CopyStartRequest& req, bool move);
  proto::BatchStatusReply CopyEnd(const std::string& tenant, const proto::CopyEndRequest& req,
                                  bool move);
  proto::BatchStatusReply CopyRevoke(const std::string& tenant, const proto::CopyEndRequest& req);

  // A TimerWheel entry whose key starts with kDeadlineTag ran out.
  void Expire(const std::string& tagged_key, uint64_t generation);
  // The session ended: its copies in flight are aborted.
  void AbortCopiesOf(SessionId sid);

 private:
  struct PendingCopy {
    uint64_t generation = 0;  // of the copy (the object keeps its own)
    // The object's generation when the copy began: a forced Remove and a new Put of the key
    // meanwhile make another object, which the copy must neither join nor release a lease of.
    uint64_t object_generation = 0;
    int64_t lease_until = 0;  // the end of the copy's read lease on the object (EndLease)
    Placement source;
    Placement dest;
    bool move = false;
    SessionId session = 0;
  };

  // Leases the object for a copy until `deadline` and returns its replicas, size and
  // generation; NOT_FOUND or FAILED_PRECONDITION (a copy in progress) otherwise.
  [[nodiscard]] absl::Status LeaseForCopy(const std::string& table_key, const std::string& key,
                                          int64_t now, int64_t deadline, Placements* replicas,
                                          uint64_t* size, uint64_t* object_generation);
  // Ends the copy's lease, which ends at `lease_until` (EndLease in object.h), if the object of
  // that generation is still there.
  void ReleaseLease(const std::string& table_key, uint64_t object_generation, int64_t lease_until);
  // Places and charges the destination on `target`.
  [[nodiscard]] absl::StatusOr<Placement> PlaceDest(const std::string& tenant,
                                                    const std::string& target, uint64_t size,
                                                    const Placements& replicas);
  // Ends a copy in progress (revoke, expiry, session death): frees and refunds the destination
  // and releases the lease on the object. Returns whether it did.
  bool AbortCopy(const std::string& table_key, uint64_t generation, const char* why);
  // Adds the destination to the object (and drops the source of a move); false when the object
  // or the destination's segment is gone.
  bool Commit(const std::string& tenant, const std::string& table_key, const PendingCopy& pc);

  const MasterOptions& options_;
  common::Clock* clock_;
  ObjectShards* shards_;
  SegmentRegistry* segments_;
  tenant::QuotaLedger* ledger_;
  TimerWheel* deadlines_;
  Evictor* evictor_;

  granary::common::Mutex mu_;
  // Copies in flight by table key (one per object).
  absl::flat_hash_map<std::string, PendingCopy> copies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace granary::master
