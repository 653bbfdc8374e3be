#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "granary/client_options.h"
#include "link/master_link.h"
#include "proto/messages.h"
#include "transport/rma.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::client {

// A client's session with the master: the control connection (connected and greeted with a
// hello, reconnected on demand after it broke), its heartbeats, and the segment descriptors
// this master handed out (dropped when a different master answers a reconnect). The connection
// is the link nodes keep too (link/master_link.h); this class adds the client's hello (tenant,
// token, a new client id per connection), the write window, heartbeats sent and forgotten, and
// the calls' failover retries.
//
// With an etcd:// master address (HA), each (re)connect first reads the active master from
// granary/<cluster_id>/master_view, and a master whose epoch (in the view and in its hello
// reply) is older than one already seen is refused. A call then rides out a failover: while no
// master answers, or the one it reached says NOT_LEADER, it waits for the next connect attempt
// and retries, until its rpc_timeout_ms has passed; then it fails with UNAVAILABLE.
//
// Owned by the client; lives as long as it, and must be destroyed before its Worker (the
// destructor stops the heartbeat thread and drops the connection). Thread-safe: any number of
// threads may call at once. Call takes the link's locks to get the connection (and waits for a
// reconnect another thread is making); SegmentFor one lock per lookup.
class MasterSession {
 public:
  // Connects now, so that a wrong address or tenant fails here and not at the first request,
  // then starts the heartbeat thread. Lines it logs go by `log_route`, which must outlive it.
  // Each failed reconnect counts in `connect_failures` (may be null).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MasterSession>> Create(
      const ClientOptions& options, transport::Worker* worker, const common::LogRoute* log_route,
      common::MetricCounter* connect_failures = nullptr);
  ~MasterSession();
  MasterSession(const MasterSession&) = delete;
  MasterSession& operator=(const MasterSession&) = delete;

  // The live connection, reconnecting (and saying hello) when the last one broke. After a
  // failed reconnect, calls fail fast with UNAVAILABLE (naming the master, the last error and
  // when the next attempt is due) until a jittered, exponentially growing back-off (50 ms, up
  // to 2 s) has passed: callers that retry at once never turn into a tight connect loop.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<transport::RpcClient>> Connection() {
    return link_->Connection();
  }
  // Any control request, with one reconnect on a broken session (HA: retried until the
  // request's timeout while the master is failing over; see the class comment).
  template <typename Req, typename Rep>
  [[nodiscard]] absl::StatusOr<Rep> Call(proto::MsgType type, const Req& req);
  // The same without waiting: many may be in flight on the one session. No reconnect (a broken
  // session fails the future with UNAVAILABLE; the next Call reconnects) and no deadline: the
  // caller bounds its wait (future::wait_for).
  template <typename Req, typename Rep>
  [[nodiscard]] std::future<absl::StatusOr<Rep>> CallAsync(proto::MsgType type, const Req& req);
  // Sends a request without waiting for its answer; nothing when no session is up. The
  // destructor waits (up to kSendDrain) for the answers to what was sent, so that a process
  // that reads and exits has released its read leases (GetEnd) before it is gone: a `granary
  // get` followed by a `granary rm` of the same key is not refused HAS_LEASE.
  template <typename Req>
  void Send(proto::MsgType type, const Req& req);
  static constexpr absl::Duration kSendDrain = absl::Seconds(1);

  // The write window of the master that answered the last hello (0: none): how long after
  // sending a PutStart the client may write what it granted.
  [[nodiscard]] int64_t write_window_ms() const { return write_window_ms_.load(); }

  // HA: the highest master epoch this session has seen (0: none, or no HA). A put aborts its
  // writes when this changed since its PutStart (the grant came from a deposed master).
  [[nodiscard]] int64_t highest_epoch() const { return link_->highest_epoch(); }

  // The descriptor of a mounted segment, asking the master once when it is not cached.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const transport::RemoteSegment>> SegmentFor(
      uint64_t id);
  // Called with the ids of the mounted segments each time the master lists them (on a lookup
  // miss), outside every lock of this class; the client closes what it mapped of the others.
  // Set once, before the session is used from other threads.
  using SegmentsListener = std::function<void(const absl::flat_hash_set<uint64_t>& mounted)>;
  void SetSegmentsListener(SegmentsListener listener) { listener_ = std::move(listener); }

 private:
  MasterSession(const ClientOptions& options, const common::LogRoute* log_route)
      : options_(options), log_route_(log_route) {}
  static constexpr int64_t kReconnectInitialMs = 50, kReconnectMaxMs = 2000;
  // The link's hook on a fresh connection: the write window, and the segment descriptors
  // dropped when another master answers.
  void OnHello(const proto::HelloReply& rep);
  [[nodiscard]] absl::Status RefreshSegments();
  void HeartbeatLoop();

  const ClientOptions options_;
  const common::LogRoute* const log_route_;
  // The connection (link/master_link.h: the master through etcd, dial, hello, epoch fence,
  // back-off); set in Create.
  std::unique_ptr<link::MasterLink> link_;
  std::atomic<int64_t> write_window_ms_{0};
  // Sends not yet answered (shared with their callbacks, which may outlive this).
  std::shared_ptr<std::atomic<int>> unanswered_ = std::make_shared<std::atomic<int>>(0);

  granary::common::Mutex seg_mu_;
  std::string master_id_ ABSL_GUARDED_BY(seg_mu_);  // of the last hello's master
  absl::flat_hash_map<uint64_t, std::shared_ptr<const transport::RemoteSegment>> segments_
      ABSL_GUARDED_BY(seg_mu_);

  SegmentsListener listener_;  // set before use, then only read

  std::thread heartbeat_;
};

template <typename Req, typename Rep>
[[nodiscard]] absl::StatusOr<Rep> MasterSession::Call(proto::MsgType type, const Req& req) {
  const int64_t start_us = common::MonotonicUs();
  const int64_t deadline_us = start_us + options_.rpc_timeout_ms * 1000;
  absl::Status last;
  for (int attempt = 0;; ++attempt) {
    auto m = Connection();
    if (!m.ok()) {
      // HA: no master answers yet (a failover in progress): wait for the next attempt.
      if (link_->follows_etcd() && link_->WaitForNextAttempt(deadline_us)) continue;
      return m.status();
    }
    const int64_t left_ms = std::max<int64_t>(1, (deadline_us - common::MonotonicUs()) / 1000);
    auto rep = (*m)->template Invoke<Req, Rep>(
        type, req, absl::Milliseconds(link_->follows_etcd() ? left_ms : options_.rpc_timeout_ms));
    if (rep.ok()) return rep;
    last = rep.status();
    if (!link_->follows_etcd()) {
      if (!absl::IsUnavailable(last) || !(*m)->broken() || attempt > 0) return rep;
      continue;  // the session broke: reconnect once
    }
    if (!link::MasterLink::FailedOver(last, **m)) {
      // A master that does not answer in time may be a paused, deposed leader: the next call
      // reads the view again.
      if (absl::IsDeadlineExceeded(last)) link_->Drop(*m);
      return rep;
    }
    link_->Drop(*m);
    if (!link_->WaitForNextAttempt(deadline_us)) {
      return absl::UnavailableError(absl::StrCat("no master took the request within ",
                                                 options_.rpc_timeout_ms, " ms (", attempt + 1,
                                                 " attempt(s)): ", last.message()));
    }
  }
}

template <typename Req, typename Rep>
std::future<absl::StatusOr<Rep>> MasterSession::CallAsync(proto::MsgType type, const Req& req) {
  auto done = std::make_shared<std::promise<absl::StatusOr<Rep>>>();
  auto result = done->get_future();
  auto m = Connection();
  if (!m.ok()) {
    done->set_value(m.status());
    return result;
  }
  (*m)->CallAsync(proto::EncodeFrame(static_cast<uint16_t>(type), 0, req),
                  [done](absl::StatusOr<std::string> frame) {
                    if (!frame.ok()) {
                      done->set_value(frame.status());
                    } else {
                      done->set_value(transport::RpcClient::ParseReply<Rep>(*frame));
                    }
                  });
  return result;
}

template <typename Req>
void MasterSession::Send(proto::MsgType type, const Req& req) {
  auto m = Connection();
  if (!m.ok()) return;  // the session is gone, and what it held with it
  unanswered_->fetch_add(1);
  (*m)->CallAsync(
      proto::EncodeFrame(static_cast<uint16_t>(type), 0, req),
      [unanswered = unanswered_](absl::StatusOr<std::string>) { unanswered->fetch_sub(1); });
}

}  // namespace granary::client
