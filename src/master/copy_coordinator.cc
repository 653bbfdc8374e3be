#include "master/copy_coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "master/inventory_outbox.h"

namespace granary::master {

namespace {
using proto::WireStatus;
}  // namespace

CopyCoordinator::CopyCoordinator(const MasterOptions& options, common::Clock* clock,
                                 ObjectShards* shards, SegmentRegistry* segments,
                                 tenant::QuotaLedger* ledger, TimerWheel* deadlines,
                                 Evictor* evictor)
    : options_(options),
      clock_(clock),
      shards_(shards),
      segments_(segments),
      ledger_(ledger),
      deadlines_(deadlines),
      evictor_(evictor) {}

absl::Status CopyCoordinator::LeaseForCopy(const std::string& tk, const std::string& key,
                                           int64_t now, int64_t deadline, Placements* replicas,
                                           uint64_t* size, uint64_t* object_generation) {
  ObjectShards::Shard& sh = shards_->ShardOf(tk);
  granary::common::MutexLock lock(&sh.mu);
  auto it = sh.objects.find(tk);
  if (it == sh.objects.end() || it->second.state != ObjectState::kComplete) {
    return absl::NotFoundError(absl::StrCat("key ", common::QuotedKey(key), " not found"));
  }
  {
    granary::common::MutexLock copies(&mu_);
    if (copies_.contains(tk)) {
      return absl::FailedPreconditionError(
          absl::StrCat("key ", common::QuotedKey(key), " already has a copy or move in progress"));
    }
  }
  // Lease it for the copy, so that neither eviction nor Remove takes it meanwhile.
  Object& o = it->second;
  TakeLease(o, now, deadline);
  *replicas = o.replicas;
  *size = o.size;
  *object_generation = o.generation;
  return absl::OkStatus();
}

void CopyCoordinator::ReleaseLease(const std::string& tk, uint64_t object_generation,
                                   int64_t lease_until) {
  const int64_t now = clock_->NowMs();
  ObjectShards::Shard& sh = shards_->ShardOf(tk);
  granary::common::MutexLock lock(&sh.mu);
  auto it = sh.objects.find(tk);
  if (it != sh.objects.end() && it->second.generation == object_generation) {
    EndLease(it->second, now, lease_until);
  }
}

absl::StatusOr<Placement> CopyCoordinator::PlaceDest(const std::string& tenant,
                                                     const std::string& target, uint64_t size,
                                                     const Placements& replicas) {
  // A tenant with a pool that may not spill keeps every replica in it (placement.h).
  const bool confined =
      segments_->PoolOf(tenant, proto::Tier::kHost).seen && !ledger_->PoolSpill(tenant);
  GRANARY_ASSIGN_OR_RETURN(
      Placement dest,
      segments_->AllocateOn(target, PlacementRequest::Copy(tenant, proto::Tier::kHost, !confined),
                            AllocBytes(size), replicas));
  if (absl::Status st = evictor_->ChargeWithTenantEviction(tenant, dest.size); !st.ok()) {
    segments_->Free(dest);
    return st;
  }
  return dest;
}

proto::CopyStartReply CopyCoordinator::CopyStart(SessionId sid, const std::string& tenant,
                                                 const proto::CopyStartRequest& req, bool move) {
  proto::CopyStartReply rep;
  const int64_t now = clock_->NowMs();
  const int64_t deadline = now + options_.put_start_timeout_ms;
  rep.results.resize(req.entries.size());
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    auto& res = rep.results[i];
    auto fail = [&](const absl::Status& st) { res.status = WireStatus::From(st); };
    std::string tk = TableKey(tenant, e.key);
    Placements replicas;
    uint64_t size = 0;
    uint64_t object_generation = 0;
    if (absl::Status st =
            LeaseForCopy(tk, e.key, now, deadline, &replicas, &size, &object_generation);
        !st.ok()) {
      fail(st);
      continue;
    }
    // The source: a host-tier replica where there is one (the destination node reads it
    // one-sided), else a GPU-tier one (no rkey: the client asks its node to push it through the
    // node bounce, node/gpu_bounce.h).
    size_t source = 0;
    for (size_t r = 0; r < replicas.size(); ++r) {
      auto seg = segments_->Find(replicas[r].segment_id);
      if (seg.has_value() && seg->tier == proto::Tier::kHost) {
        source = r;
        break;
      }
    }
    auto dest = PlaceDest(tenant, e.target, size, replicas);
    if (!dest.ok()) {
      ReleaseLease(tk, object_generation, deadline);
      fail(dest.status());
      continue;
    }
    PendingCopy pc;
    pc.generation = shards_->NextGeneration();
    pc.object_generation = object_generation;
    pc.lease_until = deadline;
    pc.source = replicas[source];
    pc.dest = *dest;
    pc.move = move;
    pc.session = sid;
    {
      granary::common::MutexLock copies(&mu_);
      copies_[tk] = pc;
    }
    deadlines_->Add(deadline, std::string(1, kDeadlineTag) + tk, pc.generation);
    res.generation = pc.generation;
    auto src_desc = segments_->Describe({pc.source});
    auto dst_desc = segments_->Describe({pc.dest});
    auto dst_seg = segments_->Find(pc.dest.segment_id);
    if (src_desc.empty() || dst_desc.empty() || !dst_seg.has_value()) {
      AbortCopy(tk, pc.generation, "segment gone");
      fail(absl::UnavailableError("a segment of the copy was unmounted; retry"));
      continue;
    }
    res.source = src_desc[0];
    res.dest = dst_desc[0];
    res.dest_node_address = dst_seg->node_address;
  }
  return rep;
}

bool CopyCoordinator::AbortCopy(const std::string& tk, uint64_t generation, const char* why) {
  PendingCopy pc;
  {
    granary::common::MutexLock copies(&mu_);
    auto it = copies_.find(tk);
    if (it == copies_.end() || it->second.generation != generation) return false;
    pc = it->second;
    copies_.erase(it);
  }
  // The destination node's fetch may still land (MasterOptions::aborted_put_hold_ms).
  segments_->FreeAfter({pc.dest}, clock_->NowMs(), options_.AbortedPutHoldMs());
  ledger_->Refund(TenantOfKey(tk), pc.dest.size);
  ReleaseLease(tk, pc.object_generation, pc.lease_until);
  GRANARY_LOG_DEBUG << "copy aborted (" << why << ")";
  return true;
}

void CopyCoordinator::Expire(const std::string& tagged_key, uint64_t generation) {
  AbortCopy(tagged_key.substr(1), generation, "deadline passed");
}

void CopyCoordinator::AbortCopiesOf(SessionId sid) {
  std::vector<std::pair<std::string, uint64_t>> mine;
  {
    granary::common::MutexLock copies(&mu_);
    for (const auto& [tk, pc] : copies_) {
      if (pc.session == sid) mine.emplace_back(tk, pc.generation);
    }
  }
  for (const auto& [tk, gen] : mine) AbortCopy(tk, gen, "session closed");
}

bool CopyCoordinator::Commit(const std::string& tenant, const std::string& tk,
                             const PendingCopy& pc) {
  bool source_freed = false;
  {
    ObjectShards::Shard& sh = shards_->ShardOf(tk);
    granary::common::MutexLock lock(&sh.mu);
    auto it = sh.objects.find(tk);
    if (it == sh.objects.end() || it->second.generation != pc.object_generation ||
        !segments_->Find(pc.dest.segment_id).has_value()) {
      return false;
    }
    Object& o = it->second;
    EndLease(o, clock_->NowMs(), pc.lease_until);
    o.replicas.push_back(pc.dest);
    InventoryOutbox* out = shards_->outbox();
    if (out != nullptr) out->CommittedReplica(tk, o, pc.dest, common::WallMs());
    if (pc.move) {
      for (auto r = o.replicas.begin(); r != o.replicas.end(); ++r) {
        if (r->segment_id == pc.source.segment_id && r->offset == pc.source.offset) {
          o.replicas.erase(r);
          source_freed = true;
          if (out != nullptr) out->FreedReplica(tk, o.generation, pc.source);
          break;
        }
      }
    }
    ledger_->CommitBytes(tenant, pc.dest.size);
  }
  if (source_freed) {
    segments_->Free(pc.source);
    ledger_->ReleaseBytes(tenant, pc.source.size);
  }
  return true;
}

proto::BatchStatusReply CopyCoordinator::CopyEnd(const std::string& tenant,
                                                 const proto::CopyEndRequest& req, bool move) {
  proto::BatchStatusReply rep;
  rep.results.resize(req.entries.size());
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    std::string tk = TableKey(tenant, e.key);
    PendingCopy pc;
    {
      granary::common::MutexLock copies(&mu_);
      auto it = copies_.find(tk);
      if (it == copies_.end() || it->second.generation != e.generation ||
          it->second.dest.segment_id != e.dest_segment_id || it->second.move != move) {
        rep.results[i] = WireStatus::From(absl::NotFoundError(
            absl::StrCat("no ", move ? "move" : "copy", " of key ", common::QuotedKey(e.key),
                         " generation ", e.generation, " is in progress")));
        continue;
      }
      pc = it->second;
      copies_.erase(it);
    }
    if (!Commit(tenant, tk, pc)) {
      segments_->Free(pc.dest);
      ledger_->Refund(tenant, pc.dest.size);
      rep.results[i] = WireStatus::From(absl::NotFoundError(
          absl::StrCat("key ", common::QuotedKey(e.key),
                       " or its destination segment is gone; the copy was dropped")));
    }
  }
  return rep;
}

proto::BatchStatusReply CopyCoordinator::CopyRevoke(const std::string& tenant,
                                                    const proto::CopyEndRequest& req) {
  proto::BatchStatusReply rep;
  rep.results.resize(req.entries.size());
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    if (!AbortCopy(TableKey(tenant, e.key), e.generation, "revoked")) {
      rep.results[i] = WireStatus::From(
          absl::NotFoundError(absl::StrCat("no copy of key ", common::QuotedKey(e.key),
                                           " generation ", e.generation, " is in progress")));
    }
  }
  return rep;
}

}  // namespace granary::master
