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
#include "common/backoff.h"
#include "common/clock.h"
#include "common/etcd/master_view.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "granary/client_options.h"
#include "proto/messages.h"
#include "transport/rma.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::client {

// A client's session with the master: the control connection (connected and greeted with a
// hello, reconnected on demand after it broke), its heartbeats, and the segment descriptors
// this master handed out (dropped when a different master answers a reconnect).
//
// With an etcd:// master address (HA), each (re)connect first reads the active master from
// granary/<cluster_id>/master_view, and a master whose epoch (in the view and in its hello
// reply) is older than one already seen is refused. A call then rides out a failover: while no
// master answers, or the one it reached says NOT_LEADER, it waits for the next connect attempt
// and retries, until its rpc_timeout_ms has passed; then it fails with UNAVAILABLE.
//
// Owned by the client; lives as long as it, and must be destroyed before its Worker (the
// destructor stops the heartbeat thread and drops the connection). Thread-safe: any number of
// threads may call at once. Call takes one lock to get the connection; SegmentFor one lock per
// lookup.
class MasterSession {
 public:
  // Connects now, so that a wrong address or tenant fails here and not at the first request,
  // then starts the heartbeat thread. Lines it logs go by `log_route`, which must outlive it.
  // Each failed reconnect counts in `connect_failures` (may be null).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MasterSession>> Create(
      const ClientOptions& options, transport::Worker* worker, const LogRoute* log_route,
      MetricCounter* connect_failures = nullptr);
  ~MasterSession();
  MasterSession(const MasterSession&) = delete;
  MasterSession& operator=(const MasterSession&) = delete;

  // The live connection, reconnecting (and saying hello) when the last one broke. After a
  // failed reconnect, calls fail fast with UNAVAILABLE (naming the master, the last error and
  // when the next attempt is due) until a jittered, exponentially growing back-off (50 ms, up
  // to 2 s) has passed: callers that retry at once never turn into a tight connect loop.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<transport::RpcClient>> Connection();
  // Any control request, with one reconnect on a broken session (HA: retried until the
  // request's timeout while the master is failing over; see the class comment).
  template <typename Req, typename Rep>
  [[nodiscard]] absl::StatusOr<Rep> Call(proto::MsgType type, const Req& req);
  // The same without waiting: many may be in flight on the one session. No reconnect (a broken
  // session fails the future with UNAVAILABLE; the next Call reconnects) and no deadline: the
  // caller bounds its wait (future::wait_for).
  template <typename Req, typename Rep>
  [[nodiscard]] std::future<absl::StatusOr<Rep>> CallAsync(proto::MsgType type, const Req& req);
  // Sends a request and forgets it (no answer awaited); nothing when no session is up.
  template <typename Req>
  void Send(proto::MsgType type, const Req& req);

  // The write window of the master that answered the last hello (0: none): how long after
  // sending a PutStart the client may write what it granted.
  [[nodiscard]] int64_t write_window_ms() {
    granary::MutexLock lock(&mu_);
    return write_window_ms_;
  }

  // HA: the highest master epoch this session has seen (0: none, or no HA). A put aborts its
  // writes when this changed since its PutStart (the grant came from a deposed master).
  [[nodiscard]] int64_t highest_epoch() const { return highest_epoch_->load(); }

  // The descriptor of a mounted segment, asking the master once when it is not cached.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const transport::RemoteSegment>> SegmentFor(
      uint64_t id);
  // Called with the ids of the mounted segments each time the master lists them (on a lookup
  // miss), outside every lock of this class; the client closes what it mapped of the others.
  // Set once, before the session is used from other threads.
  using SegmentsListener = std::function<void(const absl::flat_hash_set<uint64_t>& mounted)>;
  void SetSegmentsListener(SegmentsListener listener) { listener_ = std::move(listener); }

 private:
  MasterSession(const ClientOptions& options, transport::Worker* worker, const LogRoute* log_route)
      : options_(options), worker_(worker), log_route_(log_route) {}
  static constexpr int64_t kReconnectInitialMs = 50, kReconnectMaxMs = 2000;
  // One attempt: connect and say hello.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<transport::RpcClient>> Reconnect()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::Status RefreshSegments();
  // Forgets `m` if it is still the session's connection: the next call reconnects.
  void Drop(const std::shared_ptr<transport::RpcClient>& m);
  // HA: whether a call that got `st` from the master should reconnect and retry (the master
  // admitted nothing: it is not the leader, or the connection broke before the request went).
  [[nodiscard]] static bool FailedOver(const absl::Status& st, const transport::RpcClient& m);
  // HA: sleeps until the next connect attempt is due or `deadline_us` (MonotonicUs), whichever
  // comes first; false when the deadline has passed.
  [[nodiscard]] bool WaitForNextAttempt(int64_t deadline_us);
  void HeartbeatLoop();

  const ClientOptions options_;
  transport::Worker* const worker_;
  const LogRoute* const log_route_;
  std::unique_ptr<etcd::EtcdClient> etcd_;  // with an etcd:// master; set in Create

  granary::Mutex mu_;
  std::shared_ptr<transport::RpcClient> master_ ABSL_GUARDED_BY(mu_);
  uint32_t heartbeat_ms_ ABSL_GUARDED_BY(mu_) = 1000;
  int64_t write_window_ms_ ABSL_GUARDED_BY(mu_) = 0;
  std::string master_id_ ABSL_GUARDED_BY(mu_);
  etcd::EpochFence epochs_ ABSL_GUARDED_BY(mu_);
  // epochs_.highest(), readable without mu_; every connection's epoch fence reads it too.
  const std::shared_ptr<std::atomic<int64_t>> highest_epoch_ =
      std::make_shared<std::atomic<int64_t>>(0);
  Backoff reconnect_ ABSL_GUARDED_BY(mu_){kReconnectInitialMs, kReconnectMaxMs};
  int64_t next_attempt_us_ ABSL_GUARDED_BY(mu_) = 0;  // MonotonicUs; 0: try now
  absl::Status last_connect_error_ ABSL_GUARDED_BY(mu_);
  MetricCounter* connect_failures_ = nullptr;

  granary::Mutex seg_mu_;  // after mu_ when both are held
  absl::flat_hash_map<uint64_t, std::shared_ptr<const transport::RemoteSegment>> segments_
      ABSL_GUARDED_BY(seg_mu_);

  SegmentsListener listener_;  // set before use, then only read

  granary::Mutex hb_mu_;
  bool stopping_ ABSL_GUARDED_BY(hb_mu_) = false;
  std::thread heartbeat_;
};

template <typename Req, typename Rep>
[[nodiscard]] absl::StatusOr<Rep> MasterSession::Call(proto::MsgType type, const Req& req) {
  const int64_t start_us = MonotonicUs();
  const int64_t deadline_us = start_us + options_.rpc_timeout_ms * 1000;
  absl::Status last;
  for (int attempt = 0;; ++attempt) {
    auto m = Connection();
    if (!m.ok()) {
      // HA: no master answers yet (a failover in progress): wait for the next attempt.
      if (etcd_ != nullptr && WaitForNextAttempt(deadline_us)) continue;
      return m.status();
    }
    const int64_t left_ms = std::max<int64_t>(1, (deadline_us - MonotonicUs()) / 1000);
    auto rep = (*m)->template Invoke<Req, Rep>(
        type, req, absl::Milliseconds(etcd_ != nullptr ? left_ms : options_.rpc_timeout_ms));
    if (rep.ok()) return rep;
    last = rep.status();
    if (etcd_ == nullptr) {
      if (!absl::IsUnavailable(last) || !(*m)->broken() || attempt > 0) return rep;
      continue;  // the session broke: reconnect once
    }
    if (!FailedOver(last, **m)) {
      // A master that does not answer in time may be a paused, deposed leader: the next call
      // reads the view again.
      if (absl::IsDeadlineExceeded(last)) Drop(*m);
      return rep;
    }
    Drop(*m);
    if (!WaitForNextAttempt(deadline_us)) {
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
  (*m)->CallAsync(proto::EncodeFrame(static_cast<uint16_t>(type), 0, req),
                  [](absl::StatusOr<std::string>) {});
}

}  // namespace granary::client
