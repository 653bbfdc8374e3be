#include "client/master_session.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "common/util.h"

namespace granary::client {

absl::StatusOr<std::unique_ptr<MasterSession>> MasterSession::Create(
    const ClientOptions& options, transport::Worker* worker, const common::LogRoute* log_route,
    common::MetricCounter* failures) {
  std::unique_ptr<MasterSession> s(new MasterSession(options, log_route));
  link::MasterLink::Options o;
  o.master = options.master_server_address;
  o.cluster_id = options.cluster_id;
  // Each etcd request is bounded well below a call's timeout, so a dead endpoint leaves time
  // to try the next one and the master.
  o.etcd_timeout_ms = static_cast<int>(std::clamp<int64_t>(options.rpc_timeout_ms / 4, 100, 1000));
  o.rpc_timeout = absl::Milliseconds(options.rpc_timeout_ms);
  o.backoff_initial_ms = kReconnectInitialMs;
  o.backoff_max_ms = kReconnectMaxMs;
  o.unavailable_errors = true;
  o.connect_failures = failures;
  o.log_route = log_route;
  auto hello = [&opts = s->options_] {
    proto::HelloRequest h;
    h.role = proto::Role::kClient;
    h.client_id = common::RandomId();
    h.tenant_id = opts.tenant_id;
    h.token = opts.tenant_token;
    return h;
  };
  auto on_hello = [raw = s.get()](const std::shared_ptr<transport::RpcClient>&,
                                  const proto::HelloReply& rep) {
    raw->OnHello(rep);
    return absl::OkStatus();
  };
  GRANARY_ASSIGN_OR_RETURN(
      s->link_,
      link::MasterLink::Create(std::move(o), worker, std::move(hello), std::move(on_hello)));
  GRANARY_RETURN_IF_ERROR(s->Connection().status());
  s->heartbeat_ = std::thread([raw = s.get()] { raw->HeartbeatLoop(); });
  return s;
}

MasterSession::~MasterSession() {
  // Let the answers to fire-and-forget sends (read leases released) arrive first, briefly.
  const absl::Time drain_until = absl::Now() + kSendDrain;
  while (unanswered_->load() > 0 && absl::Now() < drain_until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  link_->Shutdown();
  if (heartbeat_.joinable()) heartbeat_.join();
  link_.reset();  // drops the connection
}

void MasterSession::OnHello(const proto::HelloReply& rep) {
  write_window_ms_.store(rep.write_window_ms);
  granary::common::MutexLock lock(&seg_mu_);
  if (master_id_ != rep.master_id) {
    // A different master (a restart or failover): segment descriptors may have changed.
    master_id_ = rep.master_id;
    segments_.clear();
  }
}

void MasterSession::HeartbeatLoop() {
  common::SetThreadLogRoute(log_route_);
  while (true) {
    std::shared_ptr<transport::RpcClient> m = link_->Current();
    if (!link_->WaitForHeartbeat()) return;
    if (m && !m->broken()) {
      m->CallAsync(proto::EncodeFrame(static_cast<uint16_t>(proto::MsgType::kHeartbeat), 0,
                                      proto::HeartbeatRequest{}),
                   [](absl::StatusOr<std::string>) {});
    }
  }
}

absl::Status MasterSession::RefreshSegments() {
  GRANARY_ASSIGN_OR_RETURN(auto rep, (Call<proto::SegmentsRequest, proto::SegmentsReply>(
                                         proto::MsgType::kSegments, proto::SegmentsRequest{})));
  absl::flat_hash_set<uint64_t> mounted;
  for (const auto& s : rep.segments) mounted.insert(s.segment_id);
  if (listener_) listener_(mounted);
  granary::common::MutexLock lock(&seg_mu_);
  segments_.clear();
  for (auto& s : rep.segments) {
    segments_[s.segment_id] = transport::RemoteSegmentOf(s);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const transport::RemoteSegment>> MasterSession::SegmentFor(
    uint64_t id) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      granary::common::MutexLock lock(&seg_mu_);
      auto it = segments_.find(id);
      if (it != segments_.end()) return it->second;
    }
    if (attempt == 0) GRANARY_RETURN_IF_ERROR(RefreshSegments());
  }
  return absl::UnavailableError(absl::StrCat("segment ", id, " is no longer mounted"));
}

}  // namespace granary::client
