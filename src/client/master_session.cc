#include "client/master_session.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "common/util.h"

namespace granary::client {

absl::StatusOr<std::unique_ptr<MasterSession>> MasterSession::Create(const ClientOptions& options,
                                                                     transport::Worker* worker,
                                                                     const LogRoute* log_route,
                                                                     MetricCounter* failures) {
  std::unique_ptr<MasterSession> s(new MasterSession(options, worker, log_route));
  s->connect_failures_ = failures;
  if (std::optional<std::string> endpoints =
          etcd::EndpointsOfMasterAddress(options.master_server_address)) {
    // Each etcd request is bounded well below a call's timeout, so a dead endpoint leaves time
    // to try the next one and the master.
    const int etcd_timeout_ms =
        static_cast<int>(std::clamp<int64_t>(options.rpc_timeout_ms / 4, 100, 1000));
    GRANARY_ASSIGN_OR_RETURN(s->etcd_, etcd::EtcdClient::Create(*endpoints, etcd_timeout_ms));
  }
  GRANARY_RETURN_IF_ERROR(s->Connection().status());
  s->heartbeat_ = std::thread([raw = s.get()] { raw->HeartbeatLoop(); });
  return s;
}

MasterSession::~MasterSession() {
  {
    granary::MutexLock lock(&hb_mu_);
    stopping_ = true;
  }
  if (heartbeat_.joinable()) heartbeat_.join();
  granary::MutexLock lock(&mu_);
  master_.reset();
}

absl::StatusOr<std::shared_ptr<transport::RpcClient>> MasterSession::Connection() {
  granary::MutexLock lock(&mu_);
  if (master_ && !master_->broken()) return master_;
  master_.reset();
  const int64_t now = MonotonicUs();
  if (now < next_attempt_us_) {
    // The last attempt's answer (its code and reason), and when the next is due.
    absl::Status st(last_connect_error_.code(),
                    absl::StrCat(last_connect_error_.message(), " (", reconnect_.failures(),
                                 " attempt(s) in a row failed; the next in ",
                                 (next_attempt_us_ - now + 999) / 1000, " ms)"));
    last_connect_error_.ForEachPayload(
        [&st](absl::string_view url, const absl::Cord& payload) { st.SetPayload(url, payload); });
    return st;
  }
  auto m = Reconnect();
  if (m.ok()) {
    reconnect_.Reset();
    next_attempt_us_ = 0;
    return m;
  }
  if (connect_failures_ != nullptr) connect_failures_->Inc();
  last_connect_error_ = m.status();
  next_attempt_us_ = MonotonicUs() + reconnect_.NextMs() * 1000;
  return m.status();
}

absl::StatusOr<std::shared_ptr<transport::RpcClient>> MasterSession::Reconnect() {
  ScopedLogRoute route(log_route_);  // reconnecting may log, on the caller's thread
  std::string address = options_.master_server_address;
  if (etcd_ != nullptr) {
    absl::StatusOr<etcd::MasterView> view = etcd::ReadMasterView(etcd_.get(), options_.cluster_id);
    if (!view.ok()) {
      return absl::UnavailableError(absl::StrCat("cannot find the active master through ",
                                                 options_.master_server_address, ": ",
                                                 view.status().message()));
    }
    // etcd answers in order, so an older view comes only from a lagging endpoint: wait.
    GRANARY_RETURN_IF_ERROR(
        epochs_.Accept(view->epoch, absl::StrCat("master_view (", view->rpc, ")")));
    highest_epoch_->store(epochs_.highest());
    address = view->rpc;
  }
  GRANARY_ASSIGN_OR_RETURN(
      std::shared_ptr<transport::RpcClient> m,
      transport::RpcClient::Create(worker_, address, /*try_shm=*/true,
                                   absl::Milliseconds(options_.rpc_timeout_ms)));
  proto::HelloRequest hello;
  hello.role = proto::Role::kClient;
  hello.client_id = RandomId();
  hello.tenant_id = options_.tenant_id;
  hello.token = options_.tenant_token;
  auto rep = m->Invoke<proto::HelloRequest, proto::HelloReply>(
      proto::MsgType::kHello, hello, absl::Milliseconds(options_.rpc_timeout_ms));
  if (!rep.ok()) {
    // A standby's answer names the active master: pass it on as it is.
    if (ErrorReasonOf(rep.status()) == ErrorReason::kNotLeader) return rep.status();
    if (absl::IsUnavailable(rep.status()) || absl::IsDeadlineExceeded(rep.status())) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach the master at ", address, ": ", rep.status().message()));
    }
    return rep.status();
  }
  GRANARY_RETURN_IF_ERROR(
      epochs_.Accept(static_cast<int64_t>(rep->epoch), absl::StrCat("the master at ", address)));
  highest_epoch_->store(epochs_.highest());
  // From now on every request carries the epoch and every reply must carry it too.
  if (rep->epoch != 0) m->SetEpochFence(static_cast<int64_t>(rep->epoch), highest_epoch_);
  heartbeat_ms_ = std::max<uint32_t>(rep->heartbeat_interval_ms, 50);
  write_window_ms_ = rep->write_window_ms;
  if (master_id_ != rep->master_id) {
    // A different master (a restart or failover): segment descriptors may have changed.
    master_id_ = rep->master_id;
    granary::MutexLock seg_lock(&seg_mu_);
    segments_.clear();
  }
  master_ = m;
  return m;
}

void MasterSession::Drop(const std::shared_ptr<transport::RpcClient>& m) {
  granary::MutexLock lock(&mu_);
  if (master_ == m) master_.reset();
}

bool MasterSession::FailedOver(const absl::Status& st, const transport::RpcClient& m) {
  if (ErrorReasonOf(st) == ErrorReason::kNotLeader) return true;
  return absl::IsUnavailable(st) && m.broken();
}

bool MasterSession::WaitForNextAttempt(int64_t deadline_us) {
  int64_t due_us;
  {
    granary::MutexLock lock(&mu_);
    due_us = next_attempt_us_;
  }
  const int64_t now = MonotonicUs();
  if (now >= deadline_us) return false;
  // At least a short pause, so that a master answering NOT_LEADER at once is not hammered.
  const int64_t until = std::min(deadline_us, std::max(due_us, now + kReconnectInitialMs * 1000));
  granary::MutexLock lock(&hb_mu_);
  if (hb_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Microseconds(until - now))) {
    return false;  // the session is closing
  }
  return MonotonicUs() < deadline_us;
}

void MasterSession::HeartbeatLoop() {
  SetThreadLogRoute(log_route_);
  while (true) {
    uint32_t interval;
    std::shared_ptr<transport::RpcClient> m;
    {
      granary::MutexLock lock(&mu_);
      interval = heartbeat_ms_;
      m = master_;
    }
    {
      granary::MutexLock lock(&hb_mu_);
      if (hb_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(interval))) {
        return;
      }
    }
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
  granary::MutexLock lock(&seg_mu_);
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
      granary::MutexLock lock(&seg_mu_);
      auto it = segments_.find(id);
      if (it != segments_.end()) return it->second;
    }
    if (attempt == 0) GRANARY_RETURN_IF_ERROR(RefreshSegments());
  }
  return absl::UnavailableError(absl::StrCat("segment ", id, " is no longer mounted"));
}

}  // namespace granary::client
