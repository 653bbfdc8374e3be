#include "master/inventory_restore.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/size.h"
#include "master/inventory_outbox.h"

namespace granary::master {
namespace {

uint8_t PinOfFlags(uint32_t flags) {
  return (flags & kPutFlagHardPin) ? kPinHard : (flags & kPutFlagSoftPin) ? kPinSoft : kPinNone;
}

absl::Status CheckRecord(const proto::InventoryRecord& r) {
  if (r.op != proto::InventoryOp::kCommit) {
    return absl::InvalidArgumentError("an inventory report carries commit records only");
  }
  if (r.tenant.empty() || tenant::QuotaLedger::IsReserved(r.tenant) ||
      r.tenant.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("bad tenant id '", r.tenant, "'"));
  }
  if (r.key.empty()) return absl::InvalidArgumentError("empty key");
  if (r.value_length == 0 || r.value_length > proto::kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("value length ", r.value_length, " of key '",
                                                   r.key, "' is outside 1..",
                                                   proto::kMaxValueBytes));
  }
  if (r.alloc_size != AllocBytes(r.value_length)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "allocation of ", r.alloc_size, " bytes for a ", r.value_length, "-byte value of key '",
        r.key, "' (expected ", AllocBytes(r.value_length), ")"));
  }
  if (r.generation == 0) return absl::InvalidArgumentError("generation 0");
  return absl::OkStatus();
}

}  // namespace

InventoryRestore::InventoryRestore(const MasterOptions& options, Clock* clock,
                                   MetricsRegistry* metrics, ObjectShards* shards,
                                   SegmentRegistry* segments, tenant::QuotaLedger* ledger)
    : options_(options),
      clock_(clock),
      shards_(shards),
      segments_(segments),
      ledger_(ledger),
      restored_(metrics->Counter("granary_master_inventory_restored_total",
                                 "Replicas restored from node inventories after a restart")),
      rejected_(metrics->Counter(
          "granary_master_inventory_rejected_total",
          "Reported records refused (bad record, overlap, or an older generation)")),
      conflicts_(metrics->Counter(
          "granary_master_inventory_conflicts_total",
          "Keys reported at two generations; the older one was dropped at its node")),
      quarantined_(metrics->Counter(
          "granary_master_quarantined_bytes_total",
          "Bytes of re-mounted segments quarantined because no inventory reported them")),
      unheld_(metrics->Counter(
          "granary_master_inventory_unheld_total",
          "Records refused from a node back from a partition: not on it when it was dropped")) {}

void InventoryRestore::Forget(uint64_t session) {
  granary::MutexLock lock(&expect_mu_);
  expected_.erase(session);
}

void InventoryRestore::ExpectOnly(uint64_t session,
                                  std::shared_ptr<const absl::flat_hash_set<uint64_t>> held) {
  granary::MutexLock lock(&expect_mu_);
  expected_[session] = std::move(held);
}

uint64_t InventoryRestore::SeedAccess(uint64_t commit_ms) {
  // Unique unless 2^20 records of one commit millisecond are restored in between; then two
  // objects share an ordinal and eviction may skip one in a round (never takes the wrong one:
  // TakeVictim re-checks the slot's object).
  const uint64_t ordinal = (std::min<uint64_t>(commit_ms, uint64_t{1} << 43) << 20) |
                           (seq_.fetch_add(1, std::memory_order_relaxed) & 0xFFFFF);
  shards_->RaiseAccessClock(ordinal);
  return ordinal;
}

absl::Status InventoryRestore::RestoreOne(uint64_t session, const proto::InventoryRecord& r,
                                          int64_t now, const absl::flat_hash_set<uint64_t>* held) {
  if (absl::Status st = CheckRecord(r); !st.ok()) return st;
  const std::string tk = TableKey(r.tenant, r.key);
  InventoryOutbox* out = shards_->outbox();
  const Placement reported{r.segment_id, r.offset, r.alloc_size, 0};
  if (held != nullptr && !held->contains(r.generation)) {
    unheld_->Inc();
    if (out != nullptr) out->FreedReplica(tk, r.generation, reported);
    return absl::FailedPreconditionError(absl::StrCat(
        "key '", r.key, "' generation ", r.generation,
        " was not on this node when the master dropped it (removed or replaced since)"));
  }
  ObjectShards::Shard& sh = shards_->ShardOf(tk);
  granary::MutexLock lock(&sh.mu);
  auto it = sh.objects.find(tk);
  if (it != sh.objects.end()) {
    Object& o = it->second;
    if (o.state != ObjectState::kComplete || o.generation > r.generation) {
      // A newer version exists (a put since the restart, or another node's newer report).
      conflicts_->Inc();
      if (out != nullptr) out->FreedReplica(tk, r.generation, reported);
      return absl::AlreadyExistsError(absl::StrCat("key '", r.key, "' has generation ",
                                                   o.generation, " here; reported ", r.generation));
    }
    if (o.generation == r.generation) {
      // Another replica of the same object (replica_num > 1), on a segment it is not on yet.
      for (const Placement& p : o.replicas) {
        if (p.segment_id == r.segment_id) {
          return absl::AlreadyExistsError(absl::StrCat("key '", r.key, "' generation ",
                                                       r.generation, " reported twice on segment ",
                                                       r.segment_id));
        }
      }
      if (o.size != r.value_length || o.replicas.size() >= proto::kMaxReplicaNum) {
        return absl::InvalidArgumentError(absl::StrCat(
            "replica of key '", r.key, "' generation ", r.generation, " disagrees in length (",
            r.value_length, " vs ", o.size, ") or exceeds ", proto::kMaxReplicaNum, " replicas"));
      }
      auto placed = segments_->Reserve(r.segment_id, session, r.offset, r.alloc_size);
      if (!placed.ok()) return placed.status();
      o.replicas.push_back(*placed);
      ledger_->Restore(r.tenant, placed->size, /*new_entry=*/false);
      return absl::OkStatus();
    }
    // The reported generation is newer: it replaces the restored older one, whose nodes drop it.
    auto placed = segments_->Reserve(r.segment_id, session, r.offset, r.alloc_size);
    if (!placed.ok()) return placed.status();
    conflicts_->Inc();
    if (out != nullptr) out->Freed(tk, o.generation, o.replicas);
    segments_->Free(o.replicas);
    ledger_->Release(r.tenant, PlacedBytes(o.replicas));
    o.replicas.clear();
    o.replicas.push_back(*placed);  // every other field is set below
  } else {
    auto placed = segments_->Reserve(r.segment_id, session, r.offset, r.alloc_size);
    if (!placed.ok()) return placed.status();
    it = sh.objects.try_emplace(tk).first;
    it->second.replicas.push_back(*placed);
  }
  Object& o = it->second;
  o.size = r.value_length;
  o.generation = r.generation;
  o.state = ObjectState::kComplete;
  o.created_ms = now;
  o.last_access = SeedAccess(r.commit_ms);
  o.lease_count = 1;
  o.lease_until_ms = now + options_.kv_lease_ttl_ms;
  o.pin = PinOfFlags(r.flags);
  ledger_->Restore(r.tenant, PlacedBytes(o.replicas), /*new_entry=*/true);
  shards_->RaiseGeneration(r.generation + 1);
  return absl::OkStatus();
}

proto::InventoryReportReply InventoryRestore::Report(uint64_t session,
                                                     const proto::InventoryReportRequest& req) {
  proto::InventoryReportReply rep;
  const int64_t now = clock_->NowMs();
  absl::Status first_error;
  std::shared_ptr<const absl::flat_hash_set<uint64_t>> held;
  {
    granary::MutexLock lock(&expect_mu_);
    if (auto it = expected_.find(session); it != expected_.end()) {
      held = it->second;
      if (req.last) expected_.erase(it);
    }
  }
  for (const proto::InventoryRecord& r : req.records) {
    absl::Status st = RestoreOne(session, r, now, held.get());
    if (st.ok()) {
      ++rep.restored;
    } else {
      ++rep.rejected;
      if (first_error.ok()) first_error = st;
    }
  }
  restored_->Inc(rep.restored);
  rejected_->Inc(rep.rejected);
  if (!first_error.ok()) {
    LOG_WARN << "inventory report of node session " << session << ": " << rep.rejected
             << " record(s) refused; the first: " << first_error;
  }
  if (req.last) {
    uint64_t quarantined = 0;
    for (uint64_t id : segments_->SegmentsOf(session)) {
      quarantined += segments_->FinishRestore(id, now);
    }
    quarantined_->Inc(quarantined);
    LOG_INFO << "inventory of node session " << session << " restored; " << FormatSize(quarantined)
             << " of unreported space quarantined";
  }
  return rep;
}

}  // namespace granary::master
