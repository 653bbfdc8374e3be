#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/log.h"
#include "link/master_link.h"
#include "node/cgroup.h"
#include "node/node_inventory.h"
#include "node/node_metrics.h"
#include "node/node_options.h"
#include "node/node_service.h"
#include "transport/rpc_client.h"
#include "transport/worker.h"

namespace granary::node {

// The node's session with the master, over the link it shares with clients (link/master_link.h:
// --master or, with etcd://, the active master named in master_view; the dial, the hello with
// the node id, the epoch fence, the back-off). On each connection it mounts every segment
// (and after a re-mount reports the node's inventory) before the link hands the connection
// out. Run's loop keeps it: connect, heartbeats (waiting for each answer, with the cgroup's
// figures), reconnect after --reconnect_backoff_max_ms at most, at once when etcd names a new
// master. The sync thread keeps the inventory up to date from the master's commit and free
// records (the InventorySync long poll). Every request after the hello carries the master's
// epoch, and a reply of a deposed master is refused (HA).
// Run() blocks until Shutdown(), then unmounts. Owned by NodeServer; Shutdown may be called
// from any thread, the rest from Run's thread.
class MasterSession {
 public:
  struct Parts {
    const NodeOptions* options = nullptr;
    transport::Worker* worker = nullptr;
    NodeService* service = nullptr;
    NodeInventory* inventory = nullptr;
    NodeMetrics* metrics = nullptr;
    common::LogRoute* log_route = nullptr;
    std::string node_id;
    std::string worker_address;  // the node worker's UCX address, sent with MountSegment
    uint16_t listen_port = 0;    // the node's RPC port, in the address clients reach it at
    // The inventory was re-adopted from a segment file (a restarted node): the first mount is a
    // resumed one too, and reports it.
    bool readopted = false;
  };
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MasterSession>> Create(Parts parts);
  ~MasterSession();

  void Run();
  void Shutdown() { link_->Shutdown(); }
  // The node's memory cgroup: its figures go in every heartbeat. Call before Run.
  void SetCgroup(const NodeCgroup* cgroup) { cgroup_ = cgroup; }

 private:
  explicit MasterSession(Parts parts) : p_(std::move(parts)) {}
  // The link's hook on a fresh connection: mount every segment, then (after a re-mount) the
  // inventory report.
  [[nodiscard]] absl::Status Mount(const std::shared_ptr<transport::RpcClient>& master);
  // After a re-mount: the inventory, checked against the headers, in batches.
  [[nodiscard]] absl::Status ReportInventory(transport::RpcClient* master);
  // The sync thread: polls the link's connection for records and applies them.
  void SyncLoop();
  // The heartbeat, with the cgroup's figures when there is one (and they could be read).
  proto::HeartbeatRequest MakeHeartbeat() const;
  void UnmountAll();

  const Parts p_;
  const NodeCgroup* cgroup_ = nullptr;  // set before Run; read by the session thread
  // The connection, published by the link once the segments are mounted and the inventory
  // reported; set in Create.
  std::unique_ptr<link::MasterLink> link_;
  std::thread sync_;
};

}  // namespace granary::node
