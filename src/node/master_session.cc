#include "node/master_session.h"

#include <algorithm>
#include <deque>
#include <future>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "proto/messages.h"
#include "transport/rma.h"

namespace granary::node {

namespace {
constexpr absl::Duration kRpcTimeout = absl::Seconds(5);
// How long the master parks an InventorySync with nothing to send; also the longest Shutdown
// waits for the sync thread.
constexpr uint32_t kSyncWaitMs = 500;
// A report batch: bounded in records and key bytes, far below the frame limit.
constexpr size_t kReportBatchBytes = 4u << 20;
// Inventory report batches in flight at once during a re-mount.
constexpr size_t kReportWindow = 4;
}  // namespace

absl::StatusOr<std::unique_ptr<MasterSession>> MasterSession::Create(Parts parts) {
  std::unique_ptr<MasterSession> s(new MasterSession(std::move(parts)));
  link::MasterLink::Options o;
  o.master = s->p_.options->master;
  o.cluster_id = s->p_.options->cluster_id;
  o.etcd_timeout_ms = 1000;
  o.rpc_timeout = kRpcTimeout;
  o.backoff_initial_ms = 100;
  o.backoff_max_ms = s->p_.options->reconnect_backoff_max_ms;
  o.connect_failures = s->p_.metrics->connect_failures;
  o.log_route = s->p_.log_route;
  auto hello = [node_id = s->p_.node_id] {
    proto::HelloRequest h;
    h.role = proto::Role::kNode;
    h.client_id = node_id;
    return h;
  };
  auto mount = [raw = s.get()](const std::shared_ptr<transport::RpcClient>& m,
                               const proto::HelloReply&) { return raw->Mount(m); };
  GRANARY_ASSIGN_OR_RETURN(s->link_, link::MasterLink::Create(std::move(o), s->p_.worker,
                                                              std::move(hello), std::move(mount)));
  return s;
}

MasterSession::~MasterSession() {
  Shutdown();
  if (sync_.joinable()) sync_.join();
  link_.reset();  // drops the connection
}

absl::Status MasterSession::Mount(const std::shared_ptr<transport::RpcClient>& master) {
  // Mounted before, in this process, or re-adopted from a segment file: the segments may hold
  // objects a (restarted) master should restore, and that master's clients may still be
  // writing.
  const bool resumed = p_.metrics->mounts->value() > 0 || p_.readopted;
  p_.service->BeginSession();
  std::string host = p_.options->local_hostname;
  if (host.empty()) host = master->LocalHost();
  if (host.empty()) host = "127.0.0.1";
  MountIdentity who;
  who.node_id = p_.node_id;
  who.node_address = common::HostPort{host, p_.listen_port}.ToString();
  who.pool = p_.options->pool;
  who.worker_address = p_.worker_address;
  who.host_id = transport::LocalHostId();
  for (size_t i = 0; i < p_.service->segments().size(); ++i) {
    GRANARY_ASSIGN_OR_RETURN(proto::MountSegmentReply mr,
                             (master->Invoke<proto::MountSegmentRequest, proto::MountSegmentReply>(
                                 proto::MsgType::kMountSegment,
                                 p_.service->MountRequest(i, who, resumed), kRpcTimeout)));
    p_.service->SetMounted(i, mr.segment_id);
    GRANARY_LOG_INFO << "mounted " << p_.service->segments()[i].name << " at master "
                     << master->address() << " as segment " << mr.segment_id << ", reachable at "
                     << who.node_address;
  }
  if (resumed) GRANARY_RETURN_IF_ERROR(ReportInventory(master.get()));
  p_.metrics->mounts->Inc();
  return absl::OkStatus();
}

absl::Status MasterSession::ReportInventory(transport::RpcClient* master) {
  const int64_t t0 = common::MonotonicUs();
  const uint64_t mismatches_before = p_.inventory->mismatches();
  const std::vector<uint64_t> ids = p_.service->MountedIds();
  NodeInventory::ReportCursor cursor = p_.inventory->BeginReport();
  // Streamed: up to kReportWindow batches in flight while the next is built, so the node's
  // building and encoding overlap the master's restoring. The master handles one connection's
  // requests in order; the last batch (which ends the report) still waits for every other
  // batch's answer, so that nothing of the report is outstanding when the master ends it.
  struct Pending {
    std::promise<absl::StatusOr<std::string>> reply;
  };
  std::deque<std::shared_ptr<Pending>> in_flight;
  uint64_t sent = 0, restored = 0, rejected = 0, batches = 0;
  auto await_oldest = [&]() -> absl::Status {
    std::shared_ptr<Pending> p = std::move(in_flight.front());
    in_flight.pop_front();
    auto fut = p->reply.get_future();
    if (fut.wait_for(absl::ToChronoNanoseconds(kRpcTimeout)) != std::future_status::ready) {
      return absl::DeadlineExceededError(
          absl::StrCat("the master did not answer an inventory report batch within ",
                       absl::FormatDuration(kRpcTimeout)));
    }
    absl::StatusOr<std::string> frame = fut.get();
    if (!frame.ok()) return frame.status();
    GRANARY_ASSIGN_OR_RETURN(proto::InventoryReportReply rep,
                             transport::RpcClient::ParseReply<proto::InventoryReportReply>(*frame));
    restored += rep.restored;
    rejected += rep.rejected;
    return absl::OkStatus();
  };
  int64_t build_us = common::MonotonicUs() - t0;
  auto next_batch = [&] {
    const int64_t b0 = common::MonotonicUs();
    auto batch =
        p_.inventory->NextBatch(&cursor, ids, proto::kMaxInventoryBatch, kReportBatchBytes);
    build_us += common::MonotonicUs() - b0;
    return batch;
  };
  std::vector<proto::InventoryRecord> current = next_batch();
  while (true) {
    std::vector<proto::InventoryRecord> next;
    if (!current.empty()) next = next_batch();
    proto::InventoryReportRequest req;
    req.last = next.empty();
    req.total = cursor.total;
    req.records = std::move(current);
    sent += req.records.size();
    ++batches;
    if (req.last) {
      while (!in_flight.empty()) GRANARY_RETURN_IF_ERROR(await_oldest());
    } else if (in_flight.size() >= kReportWindow) {
      GRANARY_RETURN_IF_ERROR(await_oldest());
    }
    auto p = std::make_shared<Pending>();
    in_flight.push_back(p);
    master->CallAsync(
        proto::EncodeFrame(static_cast<uint16_t>(proto::MsgType::kInventoryReport), 0, req),
        [p](absl::StatusOr<std::string> frame) { p->reply.set_value(std::move(frame)); });
    if (req.last) break;
    current = std::move(next);
  }
  GRANARY_RETURN_IF_ERROR(await_oldest());
  const uint64_t dropped = p_.inventory->mismatches() - mismatches_before;
  p_.metrics->mismatches->Inc(dropped);
  p_.metrics->records_reported->Inc(sent);
  p_.metrics->inventory_entries->Set(static_cast<double>(p_.inventory->size()));
  GRANARY_LOG_INFO << "reported " << sent << " inventory entr" << (sent == 1 ? "y" : "ies")
                   << " to master " << p_.options->master << " in " << batches << " batch"
                   << (batches == 1 ? "" : "es") << " and " << (common::MonotonicUs() - t0) / 1000
                   << " ms (" << build_us / 1000 << " ms of it building them): " << restored
                   << " restored, " << rejected << " refused; " << dropped
                   << " dropped here (header mismatch)";
  return absl::OkStatus();
}

void MasterSession::SyncLoop() {
  common::SetThreadLogRoute(p_.log_route);
  // The token of the last batch applied, for the connection it came on: the next poll on it
  // acknowledges that batch (the master sends unacknowledged records again).
  std::shared_ptr<transport::RpcClient> acked_on;
  uint64_t acked = 0;
  while (!link_->stopping()) {
    // Published by the link once the segments are mounted and the inventory reported.
    std::shared_ptr<transport::RpcClient> m = link_->Current();
    if (m == nullptr || m->broken()) {
      link_->SleepFor(50);
      continue;
    }
    if (m != acked_on) {
      acked_on = m;
      acked = 0;
    }
    auto rep = m->Invoke<proto::InventorySyncRequest, proto::InventorySyncReply>(
        proto::MsgType::kInventorySync, proto::InventorySyncRequest{kSyncWaitMs, acked},
        absl::Milliseconds(kSyncWaitMs) + kRpcTimeout);
    if (!rep.ok()) {
      // The session thread notices a broken connection and reconnects; records of the session
      // that broke are moot (its master dropped these segments, or is gone).
      GRANARY_LOG_DEBUG << "inventory poll failed: " << rep.status();
      // NOT_LEADER: the master lost the lead, or its reply carried a deposed epoch. Either way
      // the session thread wakes and does not wait for the next heartbeat.
      if (m->broken() || ErrorReasonOf(rep.status()) == ErrorReason::kNotLeader) link_->Wake(m);
      link_->SleepFor(50);
      continue;
    }
    uint64_t applied = 0;
    for (const proto::InventoryRecord& r : rep->records) {
      std::optional<size_t> index = p_.service->IndexOf(r.segment_id);
      if (index.has_value() && p_.inventory->Apply(*index, r)) ++applied;
    }
    p_.metrics->records_applied->Inc(applied);
    if (absl::Status st = p_.inventory->Flush(); !st.ok()) {
      p_.metrics->journal_errors->Inc();
      GRANARY_LOG_WARN << "inventory journal: " << st.message()
                       << " (a restart of this node may not re-adopt the latest objects)";
    }
    if (!rep->records.empty())
      p_.metrics->inventory_entries->Set(static_cast<double>(p_.inventory->size()));
    if (rep->token != 0) acked = rep->token;
  }
}

void MasterSession::Run() {
  common::SetThreadLogRoute(p_.log_route);
  sync_ = std::thread([this] { SyncLoop(); });
  while (!link_->stopping()) {
    std::shared_ptr<transport::RpcClient> m = link_->Current();
    if (!m || m->broken()) {
      p_.metrics->connected->Set(0);
      m.reset();  // the link drops a broken connection before it dials again
      absl::StatusOr<std::shared_ptr<transport::RpcClient>> c = link_->Connection();
      if (!c.ok()) {
        if (link_->failures() == 1) {
          GRANARY_LOG_WARN << "cannot register with master " << p_.options->master << ": "
                           << c.status() << "; retrying with back-off (up to "
                           << p_.options->reconnect_backoff_max_ms << " ms apart)";
        }
        link_->WaitToReconnect();
        continue;
      }
      p_.metrics->connected->Set(1);
    }
    // Until the next heartbeat, or the sync thread saw the connection break.
    link_->WaitForHeartbeat();
    m = link_->Current();
    if (m && !m->broken()) {
      auto hb = m->Invoke<proto::HeartbeatRequest, proto::HeartbeatReply>(
          proto::MsgType::kHeartbeat, MakeHeartbeat(), kRpcTimeout);
      if (!hb.ok()) {
        GRANARY_LOG_WARN << "heartbeat to master failed: " << hb.status() << "; reconnecting";
        link_->Drop(m);
      }
    }
  }
  if (sync_.joinable()) sync_.join();
  UnmountAll();
  p_.metrics->connected->Set(0);
}

proto::HeartbeatRequest MasterSession::MakeHeartbeat() const {
  proto::HeartbeatRequest req;
  if (cgroup_ == nullptr) return req;
  absl::StatusOr<CgroupFigures> f = cgroup_->Read();
  if (!f.ok()) {
    GRANARY_LOG_DEBUG << "cgroup figures for the heartbeat: " << f.status();
    return req;
  }
  req.has_cgroup = true;
  req.cgroup = proto::NodeCgroupReport{
      cgroup_->dir(), cgroup_->version_name(), f->limit, f->effective_limit, f->usage,
      f->peak,        f->limit_hits,           f->oom,   f->oom_kill};
  return req;
}

void MasterSession::UnmountAll() {
  std::shared_ptr<transport::RpcClient> m = link_->Current();
  if (!m || m->broken()) return;
  for (uint64_t id : p_.service->TakeMounted()) {
    auto rep = m->Invoke<proto::UnmountSegmentRequest, proto::StatusReply>(
        proto::MsgType::kUnmountSegment, proto::UnmountSegmentRequest{id}, absl::Seconds(2));
    if (rep.ok()) {
      GRANARY_LOG_INFO << "unmounted segment " << id;
    } else {
      GRANARY_LOG_WARN << "unmount of segment " << id << " failed: " << rep.status();
    }
  }
}

}  // namespace granary::node
