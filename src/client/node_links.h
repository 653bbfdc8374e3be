#pragma once

// The client's control connections to nodes (their --rpc_port listeners): the Read and Write
// messages of small values over tcp (client/inline_io.h), the Push of larger reads, and the
// Push and Fetch of the node bounce (client/gpu_bounce.h) and of Copy/Move go on them. One
// connection per node, made on first use and shared by every batch; a connection that broke,
// or that a caller dropped after a timeout, is made afresh by the next request. A node whose
// transfers timed out is held off for a jittered exponential back-off (RmaEngine's constants,
// as a node whose one-sided transfer timed out is): requests to it fail at once, UNAVAILABLE,
// until the back-off has passed.
//
// Owned by ClientImpl (destroyed after the master session, before the RmaEngine and the
// worker). Thread-safe: connections and holds are guarded by mu_; the asynchronous calls answer
// on the progress thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/backoff.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "proto/messages.h"
#include "transport/rma.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::client {

class NodeLinks {
 public:
  // transfer_timeout_ms: how long connecting and a synchronous Push may take
  // (ClientOptions::transfer_timeout_ms). The counters go into `metrics`.
  NodeLinks(transport::Worker* worker, common::MetricsRegistry* metrics,
            int64_t transfer_timeout_ms);
  ~NodeLinks();
  NodeLinks(const NodeLinks&) = delete;
  NodeLinks& operator=(const NodeLinks&) = delete;

  // The control connection to a node (other_host: known to be on another host, so it is not
  // asked to move onto shared memory). UNAVAILABLE at once while the node is held off after a
  // timed-out Read or Write (Drop with back_off) or a connect that ran out of time.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<transport::RpcClient>> Get(
      const std::string& address, bool other_host = false);
  // Forgets the connection to a node that did not answer in time: the next request opens a
  // new one, and closing the old one (once its last user lets go) stops what it had not sent.
  // back_off: the node's fault (a transfer timeout, not a put's write window); it is counted
  // in granary_client_node_transfer_timeouts_total and held off, as above.
  void Drop(const std::string& address, bool back_off = false);

  // The Push RPC (proto::PushRequest), waited for: the node's header bytes, or its error
  // naming the node.
  [[nodiscard]] absl::StatusOr<std::string> Push(const std::string& node,
                                                 const proto::PushRequest& req);
  // Push, and Fetch (`node` reads req.length bytes from req.source into its own memory),
  // answered through `done` (on the progress thread, or at once when the call cannot be
  // sent), with no timeout of their own: the caller's wait has it.
  void PushAsync(const std::string& node, const proto::PushRequest& req,
                 std::function<void(absl::StatusOr<std::string>)> done);
  void FetchAsync(const std::string& node, const proto::FetchRequest& req,
                  std::function<void(absl::Status)> done);

  // granary_client_node_transfer_timeouts_total: transfers to a node (one-sided ones too) that
  // did not finish within the transfer timeout.
  common::MetricCounter* timeouts() const { return timeouts_; }
  // granary_client_node_backoff_refusals_total: transfers refused during a node's back-off
  // (the RmaEngine counts its own refusals here too).
  common::MetricCounter* refusals() const { return refusals_; }

 private:
  transport::Worker* const worker_;
  const int64_t transfer_timeout_ms_;
  common::MetricCounter* const timeouts_;
  common::MetricCounter* const refusals_;
  granary::common::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<transport::RpcClient>> clients_
      ABSL_GUARDED_BY(mu_);
  common::PeerHolds holds_ ABSL_GUARDED_BY(mu_){transport::RmaEngine::kUnreachableInitialMs,
                                                transport::RmaEngine::kUnreachableMaxMs};
};

}  // namespace granary::client
