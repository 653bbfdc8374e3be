#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "common/etcd/etcd_client.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "master/admin_http.h"
#include "master/ha/leader_election.h"
#include "master/master_options.h"
#include "master/master_service.h"
#include "master/tenant/tenant_manager.h"
#include "transport/context.h"
#include "transport/rma.h"
#include "transport/rpc_server.h"
#include "transport/worker.h"

namespace granary::master {

// The granary_master process minus flag parsing: a UCX RPC listener feeding MasterService on
// the worker's progress thread, a timer thread, and the admin HTTP server. Owns all of them.
// Thread-safe: Shutdown may be called from any thread (a signal-watching one, say).
class MasterServer {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<MasterServer>> Create(
      const MasterOptions& options);
  ~MasterServer();

  uint16_t rpc_port() const { return rpc_->port(); }
  uint16_t http_port() const { return http_->port(); }
  MasterService* service() { return service_.get(); }
  void Shutdown();
  // Re-reads the tenant quota policy (SIGHUP). The running policy stays if the new one is bad.
  [[nodiscard]] absl::Status ReloadPolicy() { return tenants_->Reload(); }
  tenant::TenantManager* tenants() { return tenants_.get(); }
  // /health?deep=1: a real put, get and remove of a 4 KiB object through a node, under the
  // reserved tenant _probe (never charged, never listed). Returns the round trip in µs and the
  // node used.
  [[nodiscard]] absl::StatusOr<std::pair<double, std::string>> Probe();
  void Wait() { stopped_.WaitForNotification(); }
  // Whether this master may admit mutating requests: always without HA; with HA, while it
  // leads (elected and within its lease, LeaderElection::Leading).
  bool IsActive() const { return election_ == nullptr || election_->Leading(); }
  // The epoch stamped into every reply frame: that of this master's last election, also once
  // fenced (what it sends then was decided while it led, or is a refusal), so that a client or
  // node that has met a newer leader drops it. 0 without HA, or before a first election.
  int64_t ServingEpoch() const { return election_ == nullptr ? 0 : election_->LastEpoch(); }
  // HA: a master that led and was fenced stops (Wait returns) with this set when it would
  // campaign again; its tables are stale, so main() restarts the process as a fresh standby.
  bool restart_requested() const { return restart_requested_.load(); }

 private:
  MasterServer() = default;
  std::optional<std::string> Dispatch(transport::RpcServer::ConnId conn,
                                      const proto::FrameView& frame);
  // HA: the answer of a master that does not lead: UNAVAILABLE + NOT_LEADER naming the active
  // master's RPC address when known.
  std::string NotLeader(const proto::FrameView& frame) const;
  // HA: builds the etcd client and the election (started by Create once everything listens).
  [[nodiscard]] absl::Status SetUpElection();
  // Create's steps. The tenant manager (its policy writes guarded by the epoch with HA) and the
  // Hello's token check over `token_file`.
  [[nodiscard]] absl::Status SetUpTenants(tenant::TokenHashes token_file);
  // The UCX worker, the RPC listener (with the request-time histograms) and the RMA engine.
  [[nodiscard]] absl::Status StartRpc();
  // HA: campaigns, with both listeners up (their addresses go into master_view).
  void StartElection();
  RoleDetail Role() const;
  // Wakes Wait(), once.
  void NotifyStopped();
  // InventorySync: answered at once when records are queued, else parked until some are (or
  // its wait ends); FlushPolls answers parked polls, once per tick.
  std::optional<std::string> HandleInventorySync(transport::RpcServer::ConnId conn,
                                                 const proto::FrameView& frame,
                                                 const proto::InventorySyncRequest& req);
  void FlushPolls(bool all);
  void TickLoop();

  MasterOptions options_;
  common::MetricsRegistry metrics_;
  std::unique_ptr<MasterService> service_;
  std::unique_ptr<tenant::TenantManager> tenants_;
  // HA (null without --enable_ha). The election is stopped before anything else goes.
  std::unique_ptr<etcd::EtcdClient> etcd_;
  std::unique_ptr<ha::LeaderElection> election_;
  std::atomic<bool> was_active_{false};
  std::atomic<bool> restart_requested_{false};
  std::unique_ptr<transport::Context> ctx_;
  std::unique_ptr<transport::Worker> worker_;
  std::unique_ptr<transport::RpcServer> rpc_;
  std::unique_ptr<transport::RmaEngine> rma_;  // for Probe
  granary::common::Mutex probe_mu_;            // one probe at a time
  SessionId probe_session_ = 0;
  uint64_t probe_seq_ ABSL_GUARDED_BY(probe_mu_) = 0;
  std::unique_ptr<AdminHttp> http_;
  std::thread ticker_;
  std::atomic<bool> stopping_{false};
  granary::common::Notification stopped_;
  std::atomic<bool> stop_notified_{false};
  common::MetricCounter* bad_requests_ = nullptr;
  // granary_master_request_seconds{op}: the time Dispatch takes per request, by message type
  // (index = MsgType; null for types the master does not serve). Filled before the RPC server
  // starts, read-only afterwards.
  std::vector<common::MetricHistogram*> request_seconds_;
  struct ParkedPoll {
    transport::RpcServer::ConnId conn = 0;
    uint64_t request_id = 0;
    int64_t deadline_ms = 0;
    uint64_t acked = 0;  // the poll's acknowledgement (applied when it was parked; idempotent)
  };
  // Taken before the service's locks (FlushPolls asks it under this one), never under them.
  granary::common::Mutex polls_mu_;
  std::vector<ParkedPoll> polls_ ABSL_GUARDED_BY(polls_mu_);
};

}  // namespace granary::master
