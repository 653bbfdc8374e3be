#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/etcd/master_view.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "node/cgroup.h"
#include "node/data_handlers.h"
#include "node/gpu_bounce.h"
#include "node/master_session.h"
#include "node/node_inventory.h"
#include "node/node_metrics.h"
#include "node/node_options.h"
#include "node/node_service.h"
#include "node/segments.h"
#include "node/transfer_watchdog.h"
#include "transport/context.h"
#include "transport/memory.h"
#include "transport/rma.h"
#include "transport/rpc_client.h"
#include "transport/rpc_server.h"
#include "transport/topology.h"
#include "transport/worker.h"

namespace granary::node {

// The granary_node process minus flag parsing: it wires the node's parts together and owns
// them. NodeSegments allocates and registers the memory (in Create, before anything connects);
// the RPC port serves DataHandlers (Fetch, Push, Read, Write) on the UCX worker; MasterSession
// (over link::MasterLink) keeps the session with the master (mount, heartbeats, re-mount and
// inventory report after a master restart, the inventory sync); HTTP serves /metrics and /health.
// NodeService holds the mount state and the range checks. Run() blocks until Shutdown(), which
// unmounts gracefully. Thread-safe.
class NodeServer {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NodeServer>> Create(
      const NodeOptions& options);
  ~NodeServer();

  void Run() { session_->Run(); }
  void Shutdown() { session_->Shutdown(); }
  uint16_t listen_port() const { return listener_->port(); }
  uint16_t http_port() const { return http_.port(); }  // 0 without serve_http
  // The registry /metrics renders; main adds the cgroup's figures to it.
  common::MetricsRegistry& metrics() { return metrics_; }
  // The node's memory cgroup (--cgroup): its figures go in every heartbeat, for the master's
  // /api/v1/nodes. Call before Run; `cgroup` must outlive Run.
  void SetCgroup(const NodeCgroup* cgroup) { session_->SetCgroup(cgroup); }
  // Whether the node has a live session with the master and its segments are mounted.
  bool connected() const { return counters_->connected->value() > 0; }
  const std::string& node_id() const { return node_id_; }

 private:
  NodeServer();
  // The RPC port and what serves it.
  [[nodiscard]] absl::Status StartRpc();
  void StartHttp();

  NodeOptions options_;
  common::LogRoute log_route_;  // options_.log_level, on every thread of this node
  std::string node_id_;
  std::string worker_address_;
  common::MetricsRegistry metrics_;
  std::unique_ptr<NodeMetrics> counters_;  // in metrics_
  std::unique_ptr<NodeSegments> segments_;
  std::unique_ptr<transport::Context> ctx_;
  std::unique_ptr<transport::Worker> worker_;
  std::unique_ptr<transport::RpcServer> listener_;
  std::unique_ptr<transport::RmaEngine> rma_;
  // Deadlines of Fetch and Push (the requests' timeout_ms): a peer that does not complete one in
  // time is closed and held off through rma_ (RmaEngine::MarkUnreachable), then answered.
  std::unique_ptr<TransferWatchdog> watchdog_;
  // Push out of and Fetch into GPU segments for clients that cannot map them (another host, an
  // IPC open that failed): staged through pinned slots. Null without GPU segments.
  std::unique_ptr<GpuBounce> bounce_;
  std::unique_ptr<NodeService> service_;      // set in Create, after the segments
  std::unique_ptr<NodeInventory> inventory_;  // over service_'s segments
  std::unique_ptr<DataHandlers> handlers_;    // progress thread
  std::unique_ptr<MasterSession> session_;
  common::HttpServer http_;
};

}  // namespace granary::node
