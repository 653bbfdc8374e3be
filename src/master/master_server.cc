#include "master/master_server.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "proto/alloc_header.h"
#include "proto/serve.h"

namespace granary::master {

absl::StatusOr<std::unique_ptr<MasterServer>> MasterServer::Create(const MasterOptions& options) {
  GRANARY_RETURN_IF_ERROR(options.Validate());
  // Read once, at start: a bad line stops the master here, naming the file and the line.
  GRANARY_ASSIGN_OR_RETURN(tenant::TokenHashes token_file,
                           tenant::LoadTokensFile(options.tenant_tokens_file));
  if (!options.tenant_tokens_file.empty()) {
    GRANARY_LOG_INFO << "tenant tokens: " << token_file.size() << " tenant(s) from "
                     << options.tenant_tokens_file;
  }
  std::unique_ptr<MasterServer> s(new MasterServer());
  s->options_ = options;
  s->service_ =
      std::make_unique<MasterService>(options, common::SystemClock::Default(), &s->metrics_);
  MasterServer* raw = s.get();
  GRANARY_RETURN_IF_ERROR(s->SetUpElection());
  GRANARY_RETURN_IF_ERROR(s->SetUpTenants(std::move(token_file)));
  s->bad_requests_ = s->metrics_.Counter("granary_master_bad_requests_total",
                                         "Requests refused as malformed or unknown");
  GRANARY_RETURN_IF_ERROR(s->StartRpc());
  s->probe_session_ = s->service_->OpenInternalSession("_probe");
  GRANARY_ASSIGN_OR_RETURN(AdminAuth auth, AdminAuth::FromFile(options.admin_token_file));
  GRANARY_ASSIGN_OR_RETURN(
      s->http_, AdminHttp::Create(
                    options.metrics_host, options.metrics_port, s->service_.get(),
                    s->tenants_.get(), &s->metrics_, [raw] { return raw->IsActive(); },
                    [raw] { return raw->Probe(); }, auth, [raw] { return raw->Role(); }));
  s->ticker_ = std::thread([raw] { raw->TickLoop(); });
  if (s->election_ != nullptr) s->StartElection();
  GRANARY_LOG_INFO << "granary_master up: rpc port " << s->rpc_port() << ", http "
                   << options.metrics_host << ":" << s->http_port();
  return s;
}

absl::Status MasterServer::SetUpTenants(tenant::TokenHashes token_file) {
  MasterService* svc = service_.get();
  MasterServer* raw = this;
  // With HA, policy writes are guarded by the epoch when the policy lives in the same etcd.
  tenant::WriteGuard guard;
  if (election_ != nullptr && options_.enable_multi_tenants &&
      options_.tenant_quota_connector_type == "etcd") {
    if (options_.tenant_quota_connector_uri == options_.etcd_endpoints) {
      guard.view_key = election_->view_key();
      guard.epoch = [raw] { return raw->election_->LeadingEpoch(); };
      guard.on_lost = [raw] {
        raw->election_->Fence("a guarded policy write found another epoch");
      };
    } else {
      GRANARY_LOG_WARN << "HA: the quota policy's etcd (" << options_.tenant_quota_connector_uri
                       << ") is not --etcd_endpoints (" << options_.etcd_endpoints
                       << "): policy writes are not guarded by the epoch";
    }
  }
  GRANARY_ASSIGN_OR_RETURN(tenants_,
                           tenant::TenantManager::Create(
                               options_, svc->ledger(), [svc] { return svc->capacity(); }, guard));
  // Client credentials: the tokens file's hashes over the live policy. Installed before the
  // listener starts; the manager outlives every Hello (rpc_ goes first).
  svc->SetTokenCheck(
      tenants_->MakeTokenCheck(std::move(token_file), options_.require_tenant_tokens));
  return absl::OkStatus();
}

absl::Status MasterServer::StartRpc() {
  MasterServer* raw = this;
  GRANARY_ASSIGN_OR_RETURN(ctx_, transport::Context::Create("granary_master"));
  GRANARY_ASSIGN_OR_RETURN(worker_, transport::Worker::Create(ctx_.get(), "master", &metrics_));
  transport::RpcServer::Callbacks cb;
  // Request times by type: what the master itself spends per call (decode, the service's work
  // under its locks, encode), without the network; a client's latency is this plus round trips.
  for (uint16_t t = static_cast<uint16_t>(proto::MsgType::kHello);
       t <= static_cast<uint16_t>(proto::MsgType::kInventoryReport); ++t) {
    const std::string name = proto::MsgTypeName(t);
    if (name == "Fetch" || name == "Push" || name == "Stat") continue;  // node calls / unused
    request_seconds_.resize(t + 1, nullptr);
    request_seconds_[t] = metrics_.Histogram(
        "granary_master_request_seconds",
        "Time the master spends handling one request, by message type (no network)", {{"op", name}},
        common::LatencyBucketsSeconds());
  }
  cb.on_request = [raw](transport::RpcServer::ConnId c, const proto::FrameView& f) {
    const int64_t t0 = common::MonotonicNs();
    // This master's epoch, stamped into the reply (read before Dispatch checks the lead).
    const int64_t epoch = raw->ServingEpoch();
    auto reply = raw->Dispatch(c, f);
    if (reply.has_value()) proto::SetFrameEpoch(&*reply, epoch);
    const uint16_t type = f.header.type;
    if (type < raw->request_seconds_.size() && raw->request_seconds_[type] != nullptr) {
      raw->request_seconds_[type]->Observe(static_cast<double>(common::MonotonicNs() - t0) * 1e-9);
    }
    return reply;
  };
  cb.on_disconnect = [raw](transport::RpcServer::ConnId c) { raw->service_->SessionClosed(c); };
  GRANARY_ASSIGN_OR_RETURN(
      rpc_, transport::RpcServer::Create(
                worker_.get(), {options_.rpc_host, options_.rpc_port, &metrics_, "master rpc"},
                std::move(cb)));
  rma_ = std::make_unique<transport::RmaEngine>(worker_.get());
  return absl::OkStatus();
}

void MasterServer::StartElection() {
  // Both listeners are up: the address written into master_view is live when it appears.
  std::string host = options_.ha_advertise_host;
  if (host.empty()) {
    host = options_.metrics_host;
    if (host.empty() || host == "0.0.0.0" || host == "::") {
      char name[256] = {};
      host = gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
    }
  }
  // fence_margin_ms: how long before the view disappears this master stops admitting writes
  // (LeaderElection); a successor credits it against its quarantine.
  const nlohmann::json view = {{"rpc", absl::StrCat(host, ":", rpc_port())},
                               {"admin", absl::StrCat(host, ":", http_port())},
                               {"fence_margin_ms", options_.ha_margin_ms}};
  GRANARY_LOG_INFO << "HA: standing by, campaigning for " << election_->view_key() << " on "
                   << etcd_->Describe() << " (lease " << options_.ha_lease_ttl_sec << " s)";
  election_->Start(view.dump());
}

MasterServer::~MasterServer() {
  Shutdown();
  if (ticker_.joinable()) ticker_.join();
  // The admin API (Role) and the RPC dispatch (IsActive) read election_: both stop before it
  // goes (a client's request during a SIGTERM raced its reset). Its callbacks use service_ and
  // tenants_, which outlive it.
  http_.reset();
  rma_.reset();
  rpc_.reset();
  election_.reset();
  tenants_.reset();
  worker_.reset();
  ctx_.reset();
}

absl::Status MasterServer::SetUpElection() {
  if (!options_.enable_ha) return absl::OkStatus();
  // Every etcd call is bounded well below a keepalive interval (TTL/3).
  const int timeout_ms =
      static_cast<int>(std::clamp<int64_t>(options_.ha_lease_ttl_sec * 1000 / 3, 200, 1000));
  GRANARY_ASSIGN_OR_RETURN(etcd_, etcd::EtcdClient::Create(options_.etcd_endpoints, timeout_ms));
  ha::ElectionOptions eo;
  eo.cluster_id = options_.cluster_id;
  eo.lease_ttl_sec = options_.ha_lease_ttl_sec;
  eo.margin_ms = options_.ha_margin_ms;
  ha::LeaderElection::Callbacks cb;
  cb.on_elected = [this](int64_t epoch, uint64_t term, const std::string& previous_view) {
    // As after a restart: generations of the new term, a fresh write window for the previous
    // leader's clients, the policy as stored now. Nodes re-mount and report their inventories.
    service_->BecomeActive(term, ha::FenceMarginOfView(previous_view));
    if (absl::Status st = tenants_->Reload(); !st.ok() && tenants_->enabled()) {
      GRANARY_LOG_WARN << "HA: elected at epoch " << epoch << " but re-reading the policy failed "
                       << "(the last one read stays): " << st;
    }
    was_active_.store(true);
  };
  cb.may_campaign = [this] {
    if (!was_active_.load()) return true;
    GRANARY_LOG_WARN << "HA: this master led before and was fenced; its tables are stale, so it "
                        "restarts as a fresh standby instead of campaigning again";
    restart_requested_.store(true);
    NotifyStopped();
    return false;
  };
  GRANARY_ASSIGN_OR_RETURN(election_, ha::LeaderElection::Create(etcd_.get(), eo, std::move(cb)));
  return absl::OkStatus();
}

RoleDetail MasterServer::Role() const {
  RoleDetail d;
  if (election_ == nullptr) return d;
  d.ha = true;
  const ha::ViewInfo v = election_->active_view();
  d.epoch = v.epoch;
  nlohmann::json j = nlohmann::json::parse(v.value, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    d.active_rpc = j.value("rpc", "");
    d.active_admin = j.value("admin", "");
  }
  return d;
}

std::string MasterServer::NotLeader(const proto::FrameView& f) const {
  const RoleDetail d = Role();
  std::string msg = "NOT_LEADER: this master is not the active one (a standby, or fenced)";
  if (!d.active_rpc.empty()) {
    absl::StrAppend(&msg, "; the active master is at ", d.active_rpc, " (epoch ", d.epoch, ")");
  } else {
    absl::StrAppend(&msg, "; no active master is known yet");
  }
  return proto::EncodeFrame(f.header.type | proto::kReplyBit, f.header.request_id,
                            proto::StatusReply{proto::WireStatus::From(common::WithReason(
                                absl::UnavailableError(msg), ErrorReason::kNotLeader))});
}

void MasterServer::Shutdown() {
  // HA: fence and revoke the lease first, so a standby takes over at once.
  if (election_ != nullptr && !restart_requested_.load()) election_->Stop();
  if (stopping_.exchange(true)) return;
  NotifyStopped();
}

void MasterServer::NotifyStopped() {
  // Shutdown and the election thread's restart request may both get here.
  if (!stop_notified_.exchange(true)) stopped_.Notify();
}

absl::StatusOr<std::pair<double, std::string>> MasterServer::Probe() {
  granary::common::MutexLock lock(&probe_mu_);
  constexpr uint64_t kSize = 4096;
  const std::string key = absl::StrCat("_probe/", ++probe_seq_);
  const int64_t t0 = common::MonotonicUs();
  auto started = service_->PutStart(probe_session_, proto::PutStartRequest{{{key, kSize}}, 1, 0});
  absl::Status st = started.status.ToStatus();
  if (st.ok()) st = started.results[0].status.ToStatus();
  if (!st.ok()) {
    return absl::UnavailableError(absl::StrCat("no node took the probe object: ", st.message()));
  }
  const proto::ReplicaDesc desc = started.results[0].replicas[0];
  const uint64_t gen = started.results[0].generation;
  auto seg = service_->FindSegment(desc.segment_id);
  std::shared_ptr<transport::RemoteSegment> remote =
      seg.has_value() ? transport::RemoteSegmentOf(*seg)
                      : std::make_shared<transport::RemoteSegment>();
  std::string out(proto::kAllocHeaderSize + kSize, '\0'), in(out.size(), '\0');
  proto::AllocHeader h;
  h.generation = gen;
  h.key_hash = common::HashBytes(key);
  h.value_length = kSize;
  std::memcpy(out.data(), &h, sizeof(h));
  for (uint64_t i = 0; i < kSize; ++i)
    out[proto::kAllocHeaderSize + i] = static_cast<char>(i * 7 + gen);
  auto transfer = [&](bool put) -> absl::Status {
    transport::RmaOp op;
    op.is_put = put;
    op.local = put ? out.data() : in.data();
    op.length = out.size();
    op.remote_addr = desc.address;
    op.segment = remote;
    // The buffers are this frame's: past the timeout the node is forgotten (its endpoint
    // closed) and the transfer still waited for.
    absl::Status st = rma_->ExecuteWithin(
        {op}, absl::Seconds(5), [&] { rma_->ForgetNode(remote->node_address); },
        absl::InfiniteDuration());
    if (absl::IsDeadlineExceeded(st)) {
      return absl::DeadlineExceededError("the probe transfer took more than 5 s");
    }
    return st;
  };
  proto::KeyGenRequest kg{{{key, gen}}};
  st = seg.has_value() ? transfer(true) : absl::UnavailableError("the probe's segment is gone");
  if (!st.ok()) {
    service_->PutRevoke(probe_session_, kg);
    return absl::UnavailableError(
        absl::StrCat("probe write to ", remote->node_address, " failed: ", st.message()));
  }
  service_->PutEnd(probe_session_, kg);
  auto got = service_->Get(probe_session_, proto::GetRequest{{key}});
  st = got.results.empty() ? absl::InternalError("empty Get") : got.results[0].status.ToStatus();
  if (st.ok()) st = transfer(false);
  if (!got.results.empty()) kg.entries[0].lease_token = got.results[0].lease_token;
  service_->GetEnd(probe_session_, kg);
  service_->Remove(probe_session_, proto::RemoveRequest{{key}, /*force=*/true});
  if (!st.ok()) {
    return absl::UnavailableError(
        absl::StrCat("probe read from ", remote->node_address, " failed: ", st.message()));
  }
  if (in != out) {
    return absl::DataLossError(
        absl::StrCat("probe read from ", remote->node_address, " returned different bytes"));
  }
  return std::make_pair(static_cast<double>(common::MonotonicUs() - t0), remote->node_address);
}

void MasterServer::TickLoop() {
  while (!stopping_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.tick_ms));
    for (SessionId dead : service_->Tick()) rpc_->Disconnect(dead);
    // Records reach a node within one tick of the change (10-50 ms): the batching interval.
    FlushPolls(/*all=*/false);
  }
  FlushPolls(/*all=*/true);
}

std::optional<std::string> MasterServer::HandleInventorySync(
    transport::RpcServer::ConnId conn, const proto::FrameView& f,
    const proto::InventorySyncRequest& req) {
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  proto::InventorySyncReply rep;
  auto records = service_->TakeInventory(conn, req.acked, &rep.token);
  if (!records.ok() || !records->empty() || req.wait_ms == 0) {
    if (records.ok()) {
      rep.records = std::move(*records);
    } else {
      rep.status = proto::WireStatus::From(records.status());
    }
    return proto::EncodeFrame(reply_type, f.header.request_id, rep);
  }
  granary::common::MutexLock lock(&polls_mu_);
  polls_.push_back(
      ParkedPoll{conn, f.header.request_id, common::MonotonicUs() / 1000 + req.wait_ms, req.acked});
  return std::nullopt;
}

void MasterServer::FlushPolls(bool all) {
  std::vector<ParkedPoll> due;
  const int64_t now = common::MonotonicUs() / 1000;
  {
    granary::common::MutexLock lock(&polls_mu_);
    for (auto it = polls_.begin(); it != polls_.end();) {
      if (all || now >= it->deadline_ms || service_->InventoryPending(it->conn)) {
        due.push_back(*it);
        it = polls_.erase(it);
      } else {
        ++it;
      }
    }
  }
  const uint16_t reply_type =
      static_cast<uint16_t>(proto::MsgType::kInventorySync) | proto::kReplyBit;
  const int64_t epoch = ServingEpoch();
  for (const ParkedPoll& p : due) {
    proto::InventorySyncReply rep;
    // Also once fenced: these records are of commits and frees decided while leading (a fenced
    // master admits nothing), stamped with that epoch, so a node that has met the next leader
    // drops them and one that has not keeps its inventory true to what was acknowledged.
    if (auto records = service_->TakeInventory(p.conn, p.acked, &rep.token); records.ok()) {
      rep.records = std::move(*records);
    } else {
      rep.status = proto::WireStatus::From(records.status());
    }
    // A poll of a connection that closed meanwhile is answered into the void.
    std::string frame = proto::EncodeFrame(reply_type, p.request_id, rep);
    proto::SetFrameEpoch(&frame, epoch);
    rpc_->Reply(p.conn, std::move(frame));
  }
}

std::optional<std::string> MasterServer::Dispatch(transport::RpcServer::ConnId conn,
                                                  const proto::FrameView& f) {
  using proto::MsgType;
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  const uint64_t id = f.header.request_id;
  auto fail = [&](const absl::Status& st) {
    bad_requests_->Inc();
    GRANARY_LOG_DEBUG << "bad " << proto::MsgTypeName(f.header.type) << " request: " << st;
    return proto::EncodeFrame(reply_type, id, proto::StatusReply{proto::WireStatus::From(st)});
  };
  // HA: a master that does not lead (or whose lease may have run out) admits nothing, and a
  // request of a session opened at another epoch is not this master's to serve.
  if (!IsActive()) return NotLeader(f);
  if (f.header.epoch != 0 && f.header.epoch != ServingEpoch()) {
    return proto::EncodeFrame(
        reply_type, id,
        proto::StatusReply{proto::WireStatus::From(common::WithReason(
            absl::UnavailableError(absl::StrCat(
                "NOT_LEADER: the request belongs to a session opened at epoch ", f.header.epoch,
                "; this master serves epoch ", ServingEpoch(), ": reconnect")),
            ErrorReason::kNotLeader))});
  }
  // Every message of message_table.h that the master serves, with its decoded request.
  using proto::Tag;
  return proto::Serve<proto::Server::kMaster>(
      f,
      proto::Overloaded{
          [&](Tag<MsgType::kHello>, const auto& req) {
            proto::HelloReply rep = service_->Hello(conn, req);
            if (election_ != nullptr) rep.epoch = static_cast<uint64_t>(election_->LeadingEpoch());
            return rep;
          },
          [&](Tag<MsgType::kHeartbeat>, const auto& req) { return service_->Heartbeat(conn, req); },
          [&](Tag<MsgType::kMountSegment>, const auto& req) {
            return service_->MountSegment(conn, req);
          },
          [&](Tag<MsgType::kInventorySync>, const auto& req) {
            return HandleInventorySync(conn, f, req);
          },
          [&](Tag<MsgType::kInventoryReport>, const auto& req) {
            return service_->InventoryReport(conn, req);
          },
          [&](Tag<MsgType::kUnmountSegment>, const auto& req) {
            return service_->UnmountSegment(conn, req);
          },
          [&](Tag<MsgType::kPutStart>, const auto& req) { return service_->PutStart(conn, req); },
          [&](Tag<MsgType::kPutEnd>, const auto& req) { return service_->PutEnd(conn, req); },
          [&](Tag<MsgType::kPutRevoke>, const auto& req) { return service_->PutRevoke(conn, req); },
          [&](Tag<MsgType::kGet>, const auto& req) { return service_->Get(conn, req); },
          [&](Tag<MsgType::kGetEnd>, const auto& req) { return service_->GetEnd(conn, req); },
          [&](Tag<MsgType::kExist>, const auto& req) { return service_->Exist(conn, req); },
          [&](Tag<MsgType::kRemove>, const auto& req) { return service_->Remove(conn, req); },
          [&](Tag<MsgType::kList>, const auto& req) { return service_->List(conn, req); },
          [&](Tag<MsgType::kSegments>, const auto&) { return service_->Segments(conn); },
          [&](Tag<MsgType::kLookupPrefix>, const auto& req) {
            return service_->LookupPrefix(conn, req);
          },
          [&](Tag<MsgType::kCopyStart>, const auto& req) {
            return service_->CopyStart(conn, req, false);
          },
          [&](Tag<MsgType::kMoveStart>, const auto& req) {
            return service_->CopyStart(conn, req, true);
          },
          [&](Tag<MsgType::kCopyEnd>, const auto& req) {
            return service_->CopyEnd(conn, req, false);
          },
          [&](Tag<MsgType::kMoveEnd>, const auto& req) {
            return service_->CopyEnd(conn, req, true);
          },
          [&](Tag<MsgType::kCopyRevoke>, const auto& req) {
            return service_->CopyRevoke(conn, req);
          },
          [&](Tag<MsgType::kMoveRevoke>, const auto& req) {
            return service_->CopyRevoke(conn, req);
          },
      },
      fail);
}

}  // namespace granary::master
