// MasterService: Copy and Move (a replica added on a chosen node, one-sided from the source).
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "master/master_service.h"

namespace granary::master {

namespace {
using proto::WireStatus;
// Tenant ids cannot contain control characters, so no table key starts with this.
constexpr char kCopyDeadlineTag = '\x01';
}  // namespace

proto::CopyStartReply MasterService::CopyStart(SessionId sid, const proto::CopyStartRequest& req,
                                               bool move) {
  proto::CopyStartReply rep;
  auto tenant_or = TenantOf(sid);
  if (!tenant_or.ok()) {
    rep.status = WireStatus::From(tenant_or.status());
    return rep;
  }
  const std::string& tenant = *tenant_or;
  const int64_t now = clock_->NowMs();
  const int64_t deadline = now + options_.put_start_timeout_ms;
  rep.results.resize(req.entries.size());
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    auto& res = rep.results[i];
    auto fail = [&](const absl::Status& st) { res.status = WireStatus::From(st); };
    std::string tk = TableKey(tenant, e.key);
    Shard& sh = ShardOf(tk);
    Placements replicas;
    uint64_t size = 0;
    {
      granary::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it == sh.objects.end() || it->second.state != ObjectState::kComplete) {
        fail(absl::NotFoundError(absl::StrCat("key '", e.key, "' not found")));
        continue;
      }
      {
        granary::MutexLock copies(&copies_mu_);
        if (copies_.contains(tk)) {
          fail(absl::FailedPreconditionError(
              absl::StrCat("key '", e.key, "' already has a copy or move in progress")));
          continue;
        }
      }
      // Lease it for the copy, so that neither eviction nor Remove takes it meanwhile.
      Object& o = it->second;
      if (o.lease_until_ms <= now) o.lease_count = 0;
      ++o.lease_count;
      o.lease_until_ms = std::max(o.lease_until_ms, deadline);
      replicas = o.replicas;
      size = o.size;
    }
    auto release_lease = [&] {
      granary::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it != sh.objects.end() && it->second.lease_count > 0) --it->second.lease_count;
    };
    auto dest = segments_.AllocateOn(e.target, PlacementRequest::Copy(tenant, proto::Tier::kHost),
                                     AllocBytes(size), replicas);
    absl::Status st = dest.ok() ? absl::OkStatus() : dest.status();
    if (st.ok()) {
      st = ChargeWithTenantEviction(tenant, dest->size);
      if (!st.ok()) segments_.Free(*dest);
    }
    if (!st.ok()) {
      release_lease();
      fail(st);
      continue;
    }
    PendingCopy pc;
    pc.generation = next_generation_.fetch_add(1);
    pc.source = replicas[0];
    pc.dest = *dest;
    pc.move = move;
    pc.session = sid;
    {
      granary::MutexLock copies(&copies_mu_);
      copies_[tk] = pc;
    }
    deadlines_.Add(deadline, std::string(1, kCopyDeadlineTag) + tk, pc.generation);
    res.generation = pc.generation;
    auto src_desc = Describe({pc.source});
    auto dst_desc = Describe({pc.dest});
    auto dst_seg = segments_.Find(pc.dest.segment_id);
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

bool MasterService::AbortCopy(const std::string& tk, uint64_t generation, const char* why) {
  PendingCopy pc;
  {
    granary::MutexLock copies(&copies_mu_);
    auto it = copies_.find(tk);
    if (it == copies_.end() || it->second.generation != generation) return false;
    pc = it->second;
    copies_.erase(it);
  }
  segments_.Free(pc.dest);
  ledger_.Refund(TenantOfKey(tk), pc.dest.size);
  Shard& sh = ShardOf(tk);
  granary::MutexLock lock(&sh.mu);
  auto it = sh.objects.find(tk);
  if (it != sh.objects.end() && it->second.lease_count > 0) --it->second.lease_count;
  LOG_DEBUG << "copy aborted (" << why << ")";
  return true;
}

void MasterService::AbortCopiesOf(SessionId sid) {
  std::vector<std::pair<std::string, uint64_t>> mine;
  {
    granary::MutexLock copies(&copies_mu_);
    for (const auto& [tk, pc] : copies_) {
      if (pc.session == sid) mine.emplace_back(tk, pc.generation);
    }
  }
  for (const auto& [tk, gen] : mine) AbortCopy(tk, gen, "session closed");
}

proto::BatchStatusReply MasterService::CopyEnd(SessionId sid, const proto::CopyEndRequest& req,
                                               bool move) {
  proto::BatchStatusReply rep;
  auto tenant_or = TenantOf(sid);
  if (!tenant_or.ok()) {
    rep.status = WireStatus::From(tenant_or.status());
    return rep;
  }
  const std::string& tenant = *tenant_or;
  rep.results.resize(req.entries.size());
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    std::string tk = TableKey(tenant, e.key);
    PendingCopy pc;
    {
      granary::MutexLock copies(&copies_mu_);
      auto it = copies_.find(tk);
      if (it == copies_.end() || it->second.generation != e.generation ||
          it->second.dest.segment_id != e.dest_segment_id || it->second.move != move) {
        rep.results[i] = WireStatus::From(
            absl::NotFoundError(absl::StrCat("no ", move ? "move" : "copy", " of key '", e.key,
                                             "' generation ", e.generation, " is in progress")));
        continue;
      }
      pc = it->second;
      copies_.erase(it);
    }
    Shard& sh = ShardOf(tk);
    bool done = false, source_freed = false;
    {
      granary::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it != sh.objects.end() && segments_.Find(pc.dest.segment_id).has_value()) {
        Object& o = it->second;
        if (o.lease_count > 0) --o.lease_count;
        o.replicas.push_back(pc.dest);
        if (pc.move) {
          for (auto r = o.replicas.begin(); r != o.replicas.end(); ++r) {
            if (r->segment_id == pc.source.segment_id && r->offset == pc.source.offset) {
              o.replicas.erase(r);
              source_freed = true;
              break;
            }
          }
        }
        ledger_.CommitBytes(tenant, pc.dest.size);
        done = true;
      }
    }
    if (!done) {
      segments_.Free(pc.dest);
      ledger_.Refund(tenant, pc.dest.size);
      rep.results[i] = WireStatus::From(absl::NotFoundError(absl::StrCat(
          "key '", e.key, "' or its destination segment is gone; the copy was dropped")));
      continue;
    }
    if (source_freed) {
      segments_.Free(pc.source);
      ledger_.ReleaseBytes(tenant, pc.source.size);
    }
  }
  return rep;
}

proto::BatchStatusReply MasterService::CopyRevoke(SessionId sid, const proto::CopyEndRequest& req) {
  proto::BatchStatusReply rep;
  auto tenant_or = TenantOf(sid);
  if (!tenant_or.ok()) {
    rep.status = WireStatus::From(tenant_or.status());
    return rep;
  }
  rep.results.resize(req.entries.size());
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    if (!AbortCopy(TableKey(*tenant_or, e.key), e.generation, "revoked")) {
      rep.results[i] = WireStatus::From(absl::NotFoundError(absl::StrCat(
          "no copy of key '", e.key, "' generation ", e.generation, " is in progress")));
    }
  }
  return rep;
}

}  // namespace granary::master
