#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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
// (SegmentRegistry::ReserveAll), its bytes are charged to its tenant without admission
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
// a batch's records are taken shard by shard, each shard locked once per batch; under it the
// registry's lock (per record) and the ledger's (per tenant and shard) are taken (leaves), and
// the outbox's when a loser is told to drop. Cost per record: one hash of the table key for its
// shard, one lookup-or-insert, an O(1) AllocateAt when a node's records come in ascending
// offset order per segment (the node sorts them), and no allocation of its own (the table key
// goes to a buffer of the batch); the report's first batch sizes every shard's table for the
// report's total, so the index never rehashes during it.
class InventoryRestore {
 public:
  InventoryRestore(const MasterOptions& options, common::Clock* clock,
                   common::MetricsRegistry* metrics, ObjectShards* shards,
                   SegmentRegistry* segments, tenant::QuotaLedger* ledger);

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
  // What the records of one shard in a batch add up to, settled (Settle) before the shard is
  // unlocked: ledger charges per tenant, and the counters to raise.
  struct ShardBatch {
    struct TenantCharge {
      absl::string_view tenant;  // into the report's records
      uint64_t bytes = 0;
      uint64_t entries = 0;
    };
    std::vector<TenantCharge> charges;
    uint64_t max_generation = 0;
    uint64_t max_access = 0;
    uint64_t next_seq = 0;  // of SeedAccess: a range of seq_ taken for the shard's records
    void Charge(absl::string_view tenant, uint64_t bytes, bool new_entry);
  };
  void Settle(ShardBatch* b);
  // OK when the record was restored; otherwise why not (the record is then counted rejected).
  // tk: its table key; sh: its shard; placed: its range reserved (or why not), which the call
  // takes (*used) or leaves to be freed.
  [[nodiscard]] absl::Status RestoreLocked(ObjectShards::Shard& sh, const proto::InventoryRecord& r,
                                           absl::string_view tk, absl::StatusOr<Placement>& placed,
                                           bool* used, int64_t now, ShardBatch* b)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(sh.mu);
  // Report's phases. Refusals: the records of a batch refused, and the first one's reason.
  struct Refusals {
    uint64_t count = 0;
    absl::Status first;
    void Add(absl::Status st);
  };
  struct SortedBatch;  // inventory_restore.cc
  // The report's bookkeeping for one batch (its first sizes the tables); the generations to
  // restore only (ExpectOnly), or null.
  std::shared_ptr<const absl::flat_hash_set<uint64_t>> BeginBatch(
      uint64_t session, const proto::InventoryReportRequest& req);
  // The batch's records that pass the checks (and `held`), counted per shard.
  SortedBatch SortByShard(const proto::InventoryReportRequest& req,
                          const absl::flat_hash_set<uint64_t>* held, Refusals* refused);
  // The per-shard counts turned into each shard's range of b->order.
  static void OrderByShard(SortedBatch* b);
  // Restores the sorted records, one shard locked at a time; how many were restored. used[j]:
  // whether item j took its reserved range (placed[j]).
  uint64_t RestoreByShard(const proto::InventoryReportRequest& req, const SortedBatch& b,
                          std::vector<absl::StatusOr<Placement>>& placed, int64_t now,
                          std::vector<bool>* used, Refusals* refused);
  // The report's last batch: the session's segments' unreported space is quarantined.
  void FinishReport(uint64_t session, int64_t now);
  // A report of `total` records begins: every shard's table makes room for its share at once.
  void SizeTablesFor(uint64_t session, uint64_t total);
  // The LRU ordinal of a record committed at commit_ms: commit order, with later accesses after
  // every restored one; seq is the record's own number from seq_ (taken per shard of a batch).
  static uint64_t SeedAccess(uint64_t commit_ms, uint64_t seq);

  const MasterOptions& options_;
  common::Clock* clock_;
  ObjectShards* shards_;
  SegmentRegistry* segments_;
  tenant::QuotaLedger* ledger_;
  std::atomic<uint64_t> seq_{0};
  common::MetricCounter* restored_;
  common::MetricCounter* rejected_;
  common::MetricCounter* conflicts_;
  common::MetricCounter* quarantined_;
  common::MetricCounter* unheld_;
  granary::common::Mutex expect_mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const absl::flat_hash_set<uint64_t>>> expected_
      ABSL_GUARDED_BY(expect_mu_);
  // Node sessions whose report has begun and not ended (its first batch sizes the tables).
  absl::flat_hash_set<uint64_t> reporting_ ABSL_GUARDED_BY(expect_mu_);
};

}  // namespace granary::master
