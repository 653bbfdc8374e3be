#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/etcd/master_view.h"
#include "common/log.h"
#include "common/mutex.h"
#include "node/cgroup.h"
#include "node/node_inventory.h"
#include "node/node_metrics.h"
#include "node/node_options.h"
#include "node/node_service.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::node {

// The node's session with the master: connect (to --master, or to the active master named in
// etcd's master_view), hello, mount every segment, and then heartbeats; reconnect and re-mount
// with jittered back-off when the master restarts or fails over, followed by the report of the
// node's inventory; and the sync thread, which keeps the inventory up to date from the master's
// commit and free records (the InventorySync long poll). Every request after the hello carries
// the master's epoch, and a reply of a deposed master is refused (HA).
// Run() blocks until Shutdown(), then unmounts. Owned by NodeServer; Shutdown and connected()
// may be called from any thread, the rest from Run's thread.
class MasterLink {
 public:
  struct Parts {
    const NodeOptions* options = nullptr;
    transport::Worker* worker = nullptr;
    NodeService* service = nullptr;
    NodeInventory* inventory = nullptr;
    NodeMetrics* metrics = nullptr;
    LogRoute* log_route = nullptr;
    std::string node_id;
    std::string worker_address;  // the node worker's UCX address, sent with MountSegment
    uint16_t listen_port = 0;    // the node's RPC port, in the address clients reach it at
  };
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MasterLink>> Create(Parts parts);
  ~MasterLink();

  void Run();
  void Shutdown();
  // The node's memory cgroup: its figures go in every heartbeat. Call before Run.
  void SetCgroup(const NodeCgroup* cgroup) { cgroup_ = cgroup; }

 private:
  explicit MasterLink(Parts parts) : p_(std::move(parts)) {}
  [[nodiscard]] absl::Status ConnectAndMount();
  // The master to connect to: --master, or with etcd:// the RPC address in master_view.
  [[nodiscard]] absl::StatusOr<std::string> ResolveMaster();
  // After a re-mount: the inventory, checked against the headers, in batches.
  [[nodiscard]] absl::Status ReportInventory();
  // The sync thread: polls the published connection for records and applies them.
  void SyncLoop();
  // The heartbeat, with the cgroup's figures when there is one (and they could be read).
  proto::HeartbeatRequest MakeHeartbeat() const;
  void UnmountAll();
  void SleepFor(int64_t ms);
  // SleepFor(ms), cut short when an etcd:// master_view names another master than the one
  // last tried (a failover): the back-off after a failed connect never outlasts an election.
  void SleepUntilMasterMoves(int64_t ms);

  const Parts p_;
  const NodeCgroup* cgroup_ = nullptr;  // set before Run; read by the session thread
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
  std::string last_master_address_;  // the master ConnectAndMount last tried; Run's thread only
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
};

}  // namespace granary::node
