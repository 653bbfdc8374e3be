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
#include "node/gpu_bounce.h"
#include "node/gpu_segment.h"
#include "node/host_segment.h"
#include "node/node_inventory.h"
#include "node/node_options.h"
#include "node/node_service.h"
#include "node/transfer_watchdog.h"
#include "transport/context.h"
#include "transport/memory.h"
#include "transport/rma.h"
#include "transport/rpc_client.h"
#include "transport/rpc_server.h"
#include "transport/topology.h"
#include "transport/worker.h"

namespace granary::node {

// The granary_node process minus flag parsing. Owns its segments (allocated and registered in
// Create, before anything connects), a UCX listener that clients read and write through, and a
// session with the master that it keeps alive: heartbeats, and reconnect + re-mount when the
// master restarts, followed by the report of its inventory (NodeInventory), which a second
// thread keeps up to date from the master's commit and free records (the InventorySync long
// poll). Run() blocks until Shutdown(), which unmounts gracefully. Thread-safe.
// The UCX adapter of NodeService, which holds the mount state and the range checks.
class NodeServer {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<NodeServer>> Create(
      const NodeOptions& options);
  ~NodeServer();

  void Run();
  void Shutdown();
  uint16_t listen_port() const { return listener_->port(); }
  uint16_t http_port() const { return http_.port(); }  // 0 without serve_http
  // The registry /metrics renders; main adds the cgroup's figures to it.
  MetricsRegistry& metrics() { return metrics_; }
  // The node's memory cgroup (--cgroup): its figures go in every heartbeat, for the master's
  // /api/v1/nodes. Call before Run; `cgroup` must outlive Run.
  void SetCgroup(const NodeCgroup* cgroup) { cgroup_ = cgroup; }
  // Whether the node has a live session with the master and its segments are mounted.
  bool connected() const { return connected_->value() > 0; }
  const std::string& node_id() const { return node_id_; }

 private:
  // The memory behind one of service_'s segments (same index).
  struct Segment {
    std::unique_ptr<HostSegment> memory;  // mmap segments only; null when UCX allocated it
    std::unique_ptr<transport::MemoryRegion> region;  // declared after memory: unmapped first
    // A GPU segment: memory is null, and region too unless UCX maps CUDA memory (then it is
    // the segment's CUDA mapping; ~NodeServer unmaps it before the segment is freed).
    std::unique_ptr<GpuSegment> gpu;
  };
  NodeServer() = default;
  // Allocates and registers the host segment `name` (UCX-allocated or mmap, as options say).
  [[nodiscard]] absl::Status AddHostSegment(const std::string& name,
                                            std::vector<SegmentSpan>* spans);
  // Allocates and exports the GPU segment of `device` through the device backend.
  [[nodiscard]] absl::Status AddGpuSegment(int device, std::vector<SegmentSpan>* spans);
  // Reads the topology and picks the NIC and the host segments' NUMA node (options first).
  [[nodiscard]] absl::Status ChooseTopology();
  // Fills span's nic, numa_node and gpu (`gpu`: a GPU segment's device, else -1), and its gauge.
  void PlaceSpan(SegmentSpan* span, int gpu);
  [[nodiscard]] absl::Status ConnectAndMount();
  // The master to connect to: --master, or with etcd:// the RPC address in master_view.
  [[nodiscard]] absl::StatusOr<std::string> ResolveMaster();
  // Fetch: reads a replica one-sided from another node into this node's segment (Copy/Move).
  std::optional<std::string> HandleRequest(transport::RpcServer::ConnId conn,
                                           const proto::FrameView& frame);
  // Push: writes values into a client's registered buffer and answers with their headers.
  std::optional<std::string> HandlePush(transport::RpcServer::ConnId conn,
                                        const proto::FrameView& frame);
  // Read: copies the values and then the headers into the reply (tcp peers, small values).
  std::string HandleRead(const proto::FrameView& frame);
  // Write: copies each value and then its header into place, and answers.
  std::string HandleWrite(const proto::FrameView& frame);
  // The device index of segment `index` (a GPU segment), else -1.
  int DeviceOf(size_t index) const;
  // listener_->Reply while there is a listener (Fetch and Push answers may come late).
  void Reply(transport::RpcServer::ConnId conn, std::string frame);
  // The heartbeat, with the cgroup's figures when there is one (and they could be read).
  proto::HeartbeatRequest MakeHeartbeat() const;
  // After a re-mount: the inventory, checked against the headers, in batches.
  [[nodiscard]] absl::Status ReportInventory();
  // The sync thread: polls the published connection for records and applies them.
  void SyncLoop();
  void UnmountAll();
  void SleepFor(int64_t ms);
  // SleepFor(ms), cut short when an etcd:// master_view names another master than the one
  // last tried (a failover): the back-off after a failed connect never outlasts an election.
  void SleepUntilMasterMoves(int64_t ms);

  NodeOptions options_;
  transport::Topology topology_;    // read in Create
  transport::NetDeviceChoice nic_;  // the NIC the node's context uses, and why
  int host_numa_node_ = -1;         // where host segments are bound (-1: nowhere)
  LogRoute log_route_;              // options_.log_level, on every thread of this node
  std::string node_id_;
  std::string worker_address_;
  MetricsRegistry metrics_;
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
  // Progress-thread state: the clients (RmaEngine peer names) each connection pushed to.
  absl::flat_hash_map<transport::RpcServer::ConnId, std::vector<std::string>> push_clients_;
  std::vector<Segment> segments_;
  std::unique_ptr<NodeService> service_;      // set in Create, after the segments
  std::unique_ptr<NodeInventory> inventory_;  // over service_'s segments
  // The session thread's connection; published to the sync thread (sync_master_) once the
  // segments are mounted and the inventory reported.
  std::shared_ptr<transport::RpcClient> master_;
  // With an etcd:// master: where the active master's address is read before each connect.
  std::unique_ptr<etcd::EtcdClient> etcd_;
  etcd::EpochFence epochs_;  // the highest master epoch seen; Run's thread only
  // epochs_.highest() for the master connection's epoch fence (read on the progress thread).
  const std::shared_ptr<std::atomic<int64_t>> highest_epoch_ =
      std::make_shared<std::atomic<int64_t>>(0);
  uint32_t heartbeat_ms_ = 1000;
  std::string last_master_address_;     // the master ConnectAndMount last tried; Run's thread only
  const NodeCgroup* cgroup_ = nullptr;  // set before Run; read by the session thread
  HttpServer http_;
  granary::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The sync thread's poll found sync_master_ broken (the master died): wakes the session
  // thread between heartbeats, so it reconnects at once rather than at the next heartbeat.
  bool master_lost_ ABSL_GUARDED_BY(mu_) = false;
  bool StoppingOrMasterLost() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || master_lost_;
  }
  std::shared_ptr<transport::RpcClient> sync_master_ ABSL_GUARDED_BY(mu_);
  std::thread sync_;
  MetricCounter* mounts_ = nullptr;
  MetricCounter* records_applied_ = nullptr;
  MetricCounter* records_reported_ = nullptr;
  MetricCounter* mismatches_ = nullptr;
  MetricGauge* inventory_entries_ = nullptr;
  MetricGauge* connected_ = nullptr;
  MetricCounter* connect_failures_ = nullptr;
  MetricCounter* push_timeouts_ = nullptr;
  MetricCounter* fetch_timeouts_ = nullptr;
  MetricCounter* peer_refusals_ = nullptr;
  MetricCounter* inline_values_[2] = {nullptr, nullptr};  // Read, Write
  MetricCounter* inline_bytes_[2] = {nullptr, nullptr};
};

}  // namespace granary::node
