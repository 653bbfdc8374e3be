#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "master/object.h"
#include "proto/messages.h"

namespace granary::master {

// The commit and free records on their way to the nodes (docs/architecture.md, "Node
// inventories and master restart"): one FIFO per segment, filled by the put, remove, eviction
// and copy paths as they change a complete object's replicas, and emptied by the segment's node
// through its InventorySync long poll. Nothing on the put path waits for a node: PutEnd queues
// its records and replies. Records never come from clients.
//
// Queued under the shard lock of the object they describe, so the records of one allocation
// leave in the order its changes happened. A node that does not poll (a node that has not
// started its poll yet) would let a queue grow without bound: past kMaxQueued the oldest record
// is dropped, and counted.
//
// What a master's death would lose is what is still queued: the gauge
// granary_master_inventory_oldest_pending_ms (the age of the oldest record no node has taken yet,
// 0 when every queue is empty) is that lag, computed at scrape time.
//
// Owned by MasterService; `clock` and `metrics` must outlive it. Thread-safe: one mutex, a leaf
// (taken under a shard's mutex, nothing under it). Cost per record: one hash lookup and a deque
// push of the record (with its key: one allocation per string longer than the small-string buffer).
class InventoryOutbox {
 public:
  static constexpr size_t kMaxQueued = size_t{1} << 20;  // per segment

  InventoryOutbox(common::Clock* clock, common::MetricsRegistry* metrics);

  // A complete object: a commit record for each of its replicas (or for `only`, one replica a
  // copy added). The master's own tenants ('_probe') are not recorded.
  void Committed(absl::string_view table_key, const Object& o, uint64_t commit_ms);
  void CommittedReplica(absl::string_view table_key, const Object& o, const Placement& p,
                        uint64_t commit_ms);
  // The object's replicas `ps` (of generation `generation`) were freed.
  void Freed(absl::string_view table_key, uint64_t generation, const Placements& ps);
  void FreedReplica(absl::string_view table_key, uint64_t generation, const Placement& p);

  // First drops the records of these segments that an earlier Take handed out with a token
  // up to `acked` (the node applied them: it sends the last token it got with its next poll).
  // Then returns up to max_records of what is left, oldest first per segment, and at most
  // about max_bytes of keys, with *token the token that acknowledges them. A record stays
  // queued until acknowledged: a reply lost with a dying connection or master is sent again on
  // the next poll, in order (a node applies records idempotently). Tokens are this outbox's
  // own; one from another master acknowledges nothing here, as nothing was handed out yet.
  std::vector<proto::InventoryRecord> Take(const std::vector<uint64_t>& segment_ids,
                                           size_t max_records, size_t max_bytes, uint64_t acked,
                                           uint64_t* token);
  bool HasPending(const std::vector<uint64_t>& segment_ids) const;
  // The age of the oldest record no node has acknowledged yet, in ms: 0 when there is none, at
  // least 1 when there is one (queued this millisecond).
  int64_t OldestPendingMs() const;
  // The segment is gone: its queue with it.
  void Forget(uint64_t segment_id);

 private:
  struct Queued {
    proto::InventoryRecord record;
    int64_t queued_ms;  // clock_->NowMs() when queued
    uint64_t seq;       // order of queueing, over all segments: the token that acks it
    bool handed = false;
  };
  void Push(uint64_t segment_id, proto::InventoryRecord r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  common::Clock* const clock_;
  common::MetricCounter* sent_;
  common::MetricCounter* resent_;
  common::MetricCounter* overflow_;
  mutable granary::common::Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::deque<Queued>> queues_ ABSL_GUARDED_BY(mu_);
};

}  // namespace granary::master
