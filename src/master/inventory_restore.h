#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "master/master_options.h"
#include "master/object.h"
#include "master/object_shards.h"
#include "master/segment_registry.h"
#include "master/tenant/quota_ledger.h"
#include "proto/messages.h"

namespace granary::master {

// A master rebuilding its state from the inventories re-mounted nodes report
// (docs/architecture.md, "Node inventories and master restart"). Each reported commit record
// becomes a complete object again: its range is reserved in the segment's allocator
// (SegmentRegistry::Reserve), its bytes are charged to its tenant without admission
// (QuotaLedger::Restore: charged_bytes and entries are re-derived, not stored anywhere), its LRU
// position is seeded from the commit time, it gets one read lease (a reader of the old master
// may still be reading it), and the generation counter is raised above it. The same object
// reported by two nodes (replica_num 2) restores into one object with both replicas. When one
// key is reported at two generations the highest wins; the loser's node gets a free record
// (through the InventoryOutbox), which makes it drop the entry and invalidate the header.
// A report's last batch ends the segments' restore; their unreported space is then quarantined
// (SegmentRegistry::FinishRestore).
//
// Owned by MasterService; every pointer given to the constructor must outlive it. Thread-safe:
// per record one shard lock, under which the registry's and the ledger's (leaves) are taken, and
// the outbox's when a loser is told to drop. Cost per record: one hash of the table key, one
// insert, an O(1) AllocateAt when a node's records come in ascending offset order per segment
// (the node sorts them), and no allocation beyond the key's.
class InventoryRestore {
 public:
  InventoryRestore(const MasterOptions& options, Clock* clock, MetricsRegistry* metrics,
                   ObjectShards* shards, SegmentRegistry* segments, tenant::QuotaLedger* ledger);

  // One batch of the report of node session `session`: every record must name a segment that
  // session mounted.
  proto::InventoryReportReply Report(uint64_t session, const proto::InventoryReportRequest& req);

  // Node session `session` is a node this master dropped (a partition) coming back: restore
  // only the objects it held when it was dropped (`held`: their generations), until its report
  // ends. Anything else it reports was removed or replaced meanwhile, and its bytes cannot be
  // trusted: the free record may never have reached the node (records queued for a dropped
  // node are forgotten), and the space may have been reused, inside the old object, by a put
  // whose commit record did not reach it either; restoring the old object would then serve
  // the new one's bytes under a valid header. Such a record is refused and its node told to
  // drop it (a free record, which also invalidates the header); its space stays quarantined.
  void ExpectOnly(uint64_t session, std::shared_ptr<const absl::flat_hash_set<uint64_t>> held);
  // The session is gone (its report may not have ended).
  void Forget(uint64_t session);

 private:
  // OK when the record was restored; otherwise why not (the record is then counted rejected).
  [[nodiscard]] absl::Status RestoreOne(uint64_t session, const proto::InventoryRecord& r,
                                        int64_t now, const absl::flat_hash_set<uint64_t>* held);
  // The LRU ordinal of a record committed at commit_ms: commit order, with later accesses after
  // every restored one.
  uint64_t SeedAccess(uint64_t commit_ms);

  const MasterOptions& options_;
  Clock* clock_;
  ObjectShards* shards_;
  SegmentRegistry* segments_;
  tenant::QuotaLedger* ledger_;
  std::atomic<uint64_t> seq_{0};
  MetricCounter* restored_;
  MetricCounter* rejected_;
  MetricCounter* conflicts_;
  MetricCounter* quarantined_;
  MetricCounter* unheld_;
  granary::Mutex expect_mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const absl::flat_hash_set<uint64_t>>> expected_
      ABSL_GUARDED_BY(expect_mu_);
};

}  // namespace granary::master
