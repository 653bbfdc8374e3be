#include "master/master_service.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/size.h"
#include "common/status_macros.h"
#include "common/util.h"

namespace granary::master {

namespace {
using proto::WireStatus;
}  // namespace

MasterService::MasterService(const MasterOptions& options, common::Clock* clock,
                             common::MetricsRegistry* metrics)
    : options_(options),
      clock_(clock),
      master_id_(common::RandomId()),
      counters_(metrics),
      ledger_(options.enable_multi_tenants),
      deadlines_(options.tick_ms),
      outbox_(clock, metrics),
      // With HA, generations come from the election term (BecomeActive).
      shards_(options.enable_ha ? 0 : common::WallMs()),
      sessions_(options_, clock, &counters_),
      evictor_(options_, clock, metrics, &counters_, &shards_, &segments_, &ledger_),
      objects_(options_, clock, &counters_, &shards_, &segments_, &ledger_, &deadlines_, &sessions_,
               &evictor_),
      copies_(options_, clock, &shards_, &segments_, &ledger_, &deadlines_, &evictor_),
      restore_(options_, clock, metrics, &shards_, &segments_, &ledger_),
      quarantined_bytes_(metrics->Gauge(
          "granary_master_quarantined_bytes",
          "Bytes out of allocation for a while: unreported space of re-mounted segments until the "
          "write window after the mount ends, and space of aborted puts held against their late "
          "writes")) {
  shards_.set_outbox(&outbox_);
  // Any write granted by a previous master ended within the write window of its PutStart: until
  // then, space that no inventory reports may still be written by a late writer of that master.
  segments_.SetQuarantineUntil(clock_->NowMs() + options_.WriteWindowMs() +
                               options_.restart_quarantine_margin_ms);
  ExportMasterGauges(
      metrics, [this] { return GetStats(); }, &ledger_, &segments_);
}

template <typename Reply, typename F>
Reply MasterService::ForTenant(SessionId sid, F&& f) {
  auto tenant = sessions_.TenantOf(sid);
  if (!tenant.ok()) {
    Reply rep;
    rep.status = WireStatus::From(tenant.status());
    return rep;
  }
  return f(*tenant);
}

proto::HeartbeatReply MasterService::Heartbeat(SessionId sid, const proto::HeartbeatRequest& req) {
  proto::HeartbeatReply rep;
  if (absl::Status st = sessions_.Heartbeat(sid, req); !st.ok()) rep.status = WireStatus::From(st);
  return rep;
}

std::vector<MasterService::NodeInfo> MasterService::ListNodes() const {
  std::vector<proto::SegmentInfo> segments = segments_.List();
  std::vector<NodeInfo> out;
  for (SessionTable::NodeView& n : sessions_.Nodes()) {
    NodeInfo info;
    info.session = std::move(n);
    for (const proto::SegmentInfo& s : segments) {
      if (s.node_id == info.session.node_id) info.segments.push_back(s);
    }
    out.push_back(std::move(info));
  }
  return out;
}

void MasterService::SessionClosed(SessionId sid) {
  copies_.AbortCopiesOf(sid);
  std::optional<SessionTable::Session> s = sessions_.Remove(sid);
  if (!s.has_value()) return;
  if (!s->in_flight.empty()) {
    std::vector<std::string> keys(s->in_flight.begin(), s->in_flight.end());
    objects_.FreeInFlight(sid, keys);
    GRANARY_LOG_INFO << "session " << sid << " closed: freed " << keys.size()
                     << " allocation(s) it had in flight";
  }
  if (s->role == proto::Role::kNode) {
    restore_.Forget(sid);
    std::vector<uint64_t> ids = segments_.SegmentsOf(sid);
    // Node ids as its segments name them (the hello's client id is the same for granary_node).
    absl::flat_hash_set<std::string> node_ids{s->client_id};
    for (uint64_t id : ids) {
      if (auto info = segments_.Find(id)) node_ids.insert(info->node_id);
    }
    auto held = std::make_shared<absl::flat_hash_set<uint64_t>>();
    if (!ids.empty()) {
      GRANARY_LOG_INFO << "node session " << sid << " closed: unmounting " << ids.size()
                       << " segment(s)";
      *held = DropSegments(ids);
    }
    granary::common::MutexLock lock(&dropped_mu_);
    // Past 15 minutes an entry no longer lengthens a quarantine (MountSegment): forget it.
    const int64_t stale = clock_->NowMs() - 15 * 60'000;
    absl::erase_if(dropped_nodes_, [&](const auto& e) { return e.second.last_seen_ms < stale; });
    for (const std::string& node : node_ids) {
      dropped_nodes_[node] = DroppedNode{s->last_seen_ms, held};
    }
  }
}

absl::flat_hash_set<uint64_t> MasterService::DropSegments(
    const std::vector<uint64_t>& segment_ids) {
  absl::flat_hash_set<uint64_t> held = objects_.DropSegments(segment_ids);
  RescaleQuotas();
  return held;
}

void MasterService::RescaleQuotas() {
  absl::flat_hash_set<std::string> pooled;
  for (const auto& p : segments_.Pools()) pooled.insert(p.tenant);
  ledger_.SetCapacity(capacity(), std::move(pooled));
}

proto::MountSegmentReply MasterService::MountSegment(SessionId sid,
                                                     const proto::MountSegmentRequest& req) {
  proto::MountSegmentReply rep;
  auto id = [&]() -> absl::StatusOr<uint64_t> {
    GRANARY_RETURN_IF_ERROR(sessions_.Touch(sid, /*need_node=*/true));
    // A resumed segment takes no new put until its report is in, for at most one write window.
    // Past this master's own restart quarantine, a resumed mount is a node this master dropped
    // (client_ttl of silence: a partition) coming back. Writes this master granted on it before
    // the drop may still be under way, and cancelled tcp writes land when the link is back,
    // retransmitted as late as the partition was long (the 30-minute soak saw them land on
    // reused space): its unreported space stays quarantined for the write window + margin +
    // client_ttl after this mount, and longer by as long as the node was gone (a retransmission
    // comes up to about that long after the link returns; capped at 15 minutes, when Linux has
    // given up retransmitting: tcp_retries2).
    // Its report may then restore only what it held when it was dropped (ExpectOnly).
    const int64_t now = clock_->NowMs();
    int64_t gone_ms = options_.client_ttl_ms;
    {
      granary::common::MutexLock lock(&dropped_mu_);
      // Known: mounted by an earlier session of this master. A node mounts each of its
      // segments (host and GPU, several of each) in one session: its second mount is not a
      // return (that made a restarted master refuse the whole report of a two-segment node).
      auto [mounted, fresh] = mounted_nodes_.try_emplace(req.node_id, sid);
      const bool known = !fresh && mounted->second != sid;
      mounted->second = sid;
      if (auto it = dropped_nodes_.find(req.node_id); it != dropped_nodes_.end()) {
        gone_ms =
            std::clamp<int64_t>(now - it->second.last_seen_ms, options_.client_ttl_ms, 15 * 60'000);
        if (req.resumed && it->second.held) restore_.ExpectOnly(sid, it->second.held);
      } else if (known && req.resumed) {
        // Dropped more than 15 minutes ago (or unmounted): nothing it holds is known to be
        // current.
        gone_ms = 15 * 60'000;
        restore_.ExpectOnly(sid, std::make_shared<absl::flat_hash_set<uint64_t>>());
      }
    }
    const int64_t after_partition =
        now >= segments_.quarantine_until()
            ? now + options_.WriteWindowMs() + options_.restart_quarantine_margin_ms + gone_ms
            : 0;
    return segments_.Mount(req, sid, now + options_.put_start_timeout_ms, after_partition);
  }();
  if (!id.ok()) {
    rep.status = WireStatus::From(id.status());
    return rep;
  }
  rep.segment_id = *id;
  RescaleQuotas();
  GRANARY_LOG_INFO << "mounted segment " << *id << " '" << req.name << "' of node " << req.node_id
                   << " at " << req.node_address << ": " << common::FormatSize(req.size)
                   << (req.resumed ? " (resumed: its inventory follows)" : "");
  return rep;
}

absl::StatusOr<std::vector<proto::InventoryRecord>> MasterService::TakeInventory(SessionId sid,
                                                                                 uint64_t acked,
                                                                                 uint64_t* token) {
  GRANARY_RETURN_IF_ERROR(sessions_.Touch(sid, /*need_node=*/true));
  // A batch stays well under the frame limit: at most kMaxInventoryBatch records and ~4 MiB.
  return outbox_.Take(segments_.SegmentsOf(sid), proto::kMaxInventoryBatch, 4u << 20, acked, token);
}

proto::InventoryReportReply MasterService::InventoryReport(
    SessionId sid, const proto::InventoryReportRequest& req) {
  if (absl::Status st = sessions_.Touch(sid, /*need_node=*/true); !st.ok()) {
    proto::InventoryReportReply rep;
    rep.status = WireStatus::From(st);
    return rep;
  }
  return restore_.Report(sid, req);
}

proto::StatusReply MasterService::UnmountSegment(SessionId sid,
                                                 const proto::UnmountSegmentRequest& req) {
  proto::StatusReply rep;
  std::vector<uint64_t> mine = segments_.SegmentsOf(sid);
  if (std::find(mine.begin(), mine.end(), req.segment_id) == mine.end()) {
    rep.status = WireStatus::From(absl::NotFoundError(
        absl::StrCat("segment ", req.segment_id, " is not mounted by this node")));
    return rep;
  }
  DropSegments({req.segment_id});
  GRANARY_LOG_INFO << "unmounted segment " << req.segment_id;
  return rep;
}

proto::PutStartReply MasterService::PutStart(SessionId sid, const proto::PutStartRequest& req) {
  return ForTenant<proto::PutStartReply>(
      sid, [&](const std::string& tenant) { return objects_.PutStart(sid, tenant, req); });
}

proto::BatchStatusReply MasterService::PutEnd(SessionId sid, const proto::KeyGenRequest& req) {
  return ForTenant<proto::BatchStatusReply>(
      sid, [&](const std::string& tenant) { return objects_.PutEnd(tenant, req); });
}

proto::BatchStatusReply MasterService::PutRevoke(SessionId sid, const proto::KeyGenRequest& req) {
  return ForTenant<proto::BatchStatusReply>(
      sid, [&](const std::string& tenant) { return objects_.PutRevoke(tenant, req); });
}

proto::GetReply MasterService::Get(SessionId sid, const proto::GetRequest& req) {
  return ForTenant<proto::GetReply>(
      sid, [&](const std::string& tenant) { return objects_.Get(tenant, req); });
}

proto::BatchStatusReply MasterService::GetEnd(SessionId sid, const proto::KeyGenRequest& req) {
  return ForTenant<proto::BatchStatusReply>(
      sid, [&](const std::string& tenant) { return objects_.GetEnd(tenant, req); });
}

proto::BatchStatusReply MasterService::Exist(SessionId sid, const proto::KeysRequest& req) {
  return ForTenant<proto::BatchStatusReply>(
      sid, [&](const std::string& tenant) { return objects_.Exist(tenant, req); });
}

proto::BatchStatusReply MasterService::Remove(SessionId sid, const proto::RemoveRequest& req) {
  return ForTenant<proto::BatchStatusReply>(
      sid, [&](const std::string& tenant) { return objects_.Remove(tenant, req); });
}

proto::ListReply MasterService::List(SessionId sid, const proto::ListRequest& req) {
  return ForTenant<proto::ListReply>(
      sid, [&](const std::string& tenant) { return objects_.List(tenant, req); });
}

proto::LookupPrefixReply MasterService::LookupPrefix(SessionId sid,
                                                     const proto::LookupPrefixRequest& req) {
  return ForTenant<proto::LookupPrefixReply>(
      sid, [&](const std::string& tenant) { return objects_.LookupPrefix(tenant, req); });
}

proto::CopyStartReply MasterService::CopyStart(SessionId sid, const proto::CopyStartRequest& req,
                                               bool move) {
  return ForTenant<proto::CopyStartReply>(
      sid, [&](const std::string& tenant) { return copies_.CopyStart(sid, tenant, req, move); });
}

proto::BatchStatusReply MasterService::CopyEnd(SessionId sid, const proto::CopyEndRequest& req,
                                               bool move) {
  return ForTenant<proto::BatchStatusReply>(
      sid, [&](const std::string& tenant) { return copies_.CopyEnd(tenant, req, move); });
}

proto::BatchStatusReply MasterService::CopyRevoke(SessionId sid, const proto::CopyEndRequest& req) {
  return ForTenant<proto::BatchStatusReply>(
      sid, [&](const std::string& tenant) { return copies_.CopyRevoke(tenant, req); });
}

proto::SegmentsReply MasterService::Segments(SessionId sid) {
  proto::SegmentsReply rep;
  if (absl::Status st = sessions_.Touch(sid); !st.ok()) {  // clients and nodes alike
    rep.status = WireStatus::From(st);
    return rep;
  }
  rep.segments = segments_.List();
  return rep;
}

std::vector<SessionId> MasterService::Tick() {
  const int64_t now = clock_->NowMs();
  for (const auto& e : deadlines_.Advance(now)) {
    if (!e.key.empty() && e.key[0] == CopyCoordinator::kDeadlineTag) {
      copies_.Expire(e.key, e.generation);
    } else if (objects_.AbortPut(e.key, e.generation, "deadline passed")) {
      counters_.put_expired->Inc();
    }
  }
  std::vector<SessionId> dead = sessions_.Expired(now);
  for (SessionId sid : dead) {
    GRANARY_LOG_WARN << "session " << sid << " sent nothing for more than "
                     << options_.client_ttl_ms << " ms: declaring it dead";
    counters_.sessions_expired->Inc();
    SessionClosed(sid);
  }
  if (uint64_t released = segments_.Expire(now); released > 0) {
    GRANARY_LOG_INFO
        << common::FormatSize(released)
        << " of quarantined or held space is allocatable again (its late writes are past)";
  }
  quarantined_bytes_->Set(static_cast<double>(segments_.totals().quarantined));
  evictor_.EvictAboveWatermark();
  return dead;
}

int64_t MasterService::BecomeActive(uint64_t term, int64_t credit_ms) {
  shards_.BeginTerm(term);
  // Every write the previous leader granted began at its client's PutStart, at or before the
  // leader's last admission, which was at least `credit_ms` before its view disappeared (an
  // expiry by t_valid's margin, a revoke by waiting it out) and so before now: such a write
  // ends by now - credit + window. The margin covers cancelled writes still landing.
  const int64_t now = clock_->NowMs();
  const int64_t full = options_.WriteWindowMs() + options_.restart_quarantine_margin_ms;
  const int64_t until = now + full - std::clamp<int64_t>(credit_ms, 0, full);
  segments_.SetQuarantineUntil(until);
  GRANARY_LOG_INFO << "HA: unreported space stays quarantined for " << until - now
                   << " ms (write window " << options_.WriteWindowMs() << " + margin "
                   << options_.restart_quarantine_margin_ms
                   << " - the previous leader's fencing margin " << credit_ms << ")";
  return until;
}

MasterService::Stats MasterService::GetStats() const {
  Stats s;
  objects_.Count(&s.objects, &s.processing);
  auto t = segments_.totals();
  s.capacity = t.capacity;
  s.used = t.used;
  s.segments = t.segments;
  s.sessions = sessions_.size();
  s.pending_deadlines = deadlines_.size();
  return s;
}

}  // namespace granary::master
