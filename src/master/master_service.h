#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "master/copy_coordinator.h"
#include "master/eviction.h"
#include "master/inventory_outbox.h"
#include "master/inventory_restore.h"
#include "master/master_metrics.h"
#include "master/master_options.h"
#include "master/object.h"
#include "master/object_shards.h"
#include "master/object_store.h"
#include "master/segment_registry.h"
#include "master/session_table.h"
#include "master/tenant/quota_ledger.h"
#include "master/tenant/tenant_tokens.h"
#include "master/timer_wheel.h"
#include "proto/messages.h"

namespace granary::master {

// The master's logic behind one facade: the RPC adapter (master_server.cc) and the admin API
// (admin_http.cc) call it with decoded requests and the caller's session; no transport, so all
// of it is testable in-process with a FakeClock. It resolves each request's session to its
// tenant and hands the work to the part with that job:
//   SessionTable      hello, heartbeat, liveness, each session's puts in flight;
//   ObjectStore       objects and leases (puts, gets, remove, list, node loss);
//   Evictor           eviction rounds and the admission paths that evict;
//   CopyCoordinator   Copy and Move;
//   master_metrics.h  the counters and the exported gauges;
// over the shared state it owns: the segments (placement.h decides who may use which), the
// quota ledger, the deadlines and the sharded object table.
//
// Ownership: MasterService owns every part; they hold pointers to each other and to the shared
// state, all members of this object, so they live exactly as long as it. `clock` and `metrics`
// must outlive it (the gauges' collector calls back into it for as long as `metrics` exists).
// Thread-safe. Lock order, outermost first: Evictor's round mutex, then one shard's mutex, then
// CopyCoordinator's, then the SegmentRegistry's and QuotaLedger's (leaves). SessionTable's and
// the TimerWheel's are taken with no other master lock held. No callback runs under a lock.
//
// Per request cost: one shard lock per key, O(1) hash lookups, an O(1) allocator call per
// replica on PutStart. Eviction and node loss scan the table (rare events).
class MasterService {
 public:
  using Stats = MasterStats;

  MasterService(const MasterOptions& options, common::Clock* clock,
                common::MetricsRegistry* metrics);
  MasterService(const MasterService&) = delete;
  MasterService& operator=(const MasterService&) = delete;

  // Sessions. The adapter assigns session ids (one per connection). A client hello must pass
  // the token check (SetTokenCheck), else UNAUTHENTICATED; node hellos are not checked.
  proto::HelloReply Hello(SessionId sid, const proto::HelloRequest& req) {
    return sessions_.Hello(sid, req, master_id_);
  }
  // Installs the client credential check used by Hello. Until called, no tenant has a token
  // and options.require_tenant_tokens applies. Call before the service is shared (the master
  // server does, before its listener starts); not thread-safe against Hello.
  void SetTokenCheck(tenant::TokenCheck check) { sessions_.SetTokenCheck(std::move(check)); }
  // Whether a client of this tenant must present a token (the admin API's has_token).
  bool TenantHasToken(const std::string& tenant) const { return sessions_.TenantHasToken(tenant); }
  // A node's heartbeat may carry its cgroup figures (shown by ListNodes).
  proto::HeartbeatReply Heartbeat(SessionId sid, const proto::HeartbeatRequest& req = {});
  // The connection closed or failed: frees the session's in-flight allocations at once, and for a
  // node unmounts its segments (dropping the replicas on them).
  void SessionClosed(SessionId sid);
  // A session of the master's own, for a reserved tenant ('_probe'): no Hello, never expires.
  SessionId OpenInternalSession(const std::string& reserved_tenant) {
    return sessions_.OpenInternal(reserved_tenant);
  }

  proto::MountSegmentReply MountSegment(SessionId sid, const proto::MountSegmentRequest& req);
  // Inventories (docs/architecture.md, "Node inventories and master restart"). A node's
  // commit and free records, taken from the outbox (at most a batch; empty when none is
  // queued), for its InventorySync long poll, after dropping those the node acknowledged
  // (`acked`, the token of the last reply it applied); *token acknowledges this batch.
  // FAILED_PRECONDITION for a session that is not a node's.
  [[nodiscard]] absl::StatusOr<std::vector<proto::InventoryRecord>> TakeInventory(SessionId sid,
                                                                                  uint64_t acked,
                                                                                  uint64_t* token);
  // Whether records are queued for the node's segments (the long poll's wake-up test).
  bool InventoryPending(SessionId sid) const {
    return outbox_.HasPending(segments_.SegmentsOf(sid));
  }
  // A re-mounted node's report: restores its objects (InventoryRestore).
  proto::InventoryReportReply InventoryReport(SessionId sid,
                                              const proto::InventoryReportRequest& req);
  proto::StatusReply UnmountSegment(SessionId sid, const proto::UnmountSegmentRequest& req);

  proto::PutStartReply PutStart(SessionId sid, const proto::PutStartRequest& req);
  proto::BatchStatusReply PutEnd(SessionId sid, const proto::KeyGenRequest& req);
  proto::BatchStatusReply PutRevoke(SessionId sid, const proto::KeyGenRequest& req);
  proto::GetReply Get(SessionId sid, const proto::GetRequest& req);
  proto::BatchStatusReply GetEnd(SessionId sid, const proto::KeyGenRequest& req);
  proto::BatchStatusReply Exist(SessionId sid, const proto::KeysRequest& req);
  proto::BatchStatusReply Remove(SessionId sid, const proto::RemoveRequest& req);
  proto::ListReply List(SessionId sid, const proto::ListRequest& req);
  // The same for the admin API, which names the tenant explicitly.
  proto::ListReply ListObjects(const std::string& tenant, const proto::ListRequest& req) const {
    return objects_.List(tenant, req);
  }
  proto::SegmentsReply Segments(SessionId sid);
  std::optional<proto::SegmentInfo> FindSegment(uint64_t id) const { return segments_.Find(id); }
  proto::LookupPrefixReply LookupPrefix(SessionId sid, const proto::LookupPrefixRequest& req);
  // Copy adds a replica on a chosen node; Move adds it and drops the source at MoveEnd (see
  // CopyCoordinator).
  proto::CopyStartReply CopyStart(SessionId sid, const proto::CopyStartRequest& req, bool move);
  proto::BatchStatusReply CopyEnd(SessionId sid, const proto::CopyEndRequest& req, bool move);
  proto::BatchStatusReply CopyRevoke(SessionId sid, const proto::CopyEndRequest& req);

  // Timers: expires allocations past their deadline and sessions past client_ttl, and evicts
  // above the high watermark. Returns the sessions it declared dead (the adapter closes them).
  std::vector<SessionId> Tick();

  // HA: this master was elected for `term` (LeaderElection). Generations move to the term's
  // range, and space of segments re-mounted by nodes that no inventory reports stays out of
  // allocation until now + write window + restart_quarantine_margin_ms - credit_ms (as after
  // a restart, less the previous leader's fencing margin: it admitted nothing within that
  // margin before its view disappeared, and so before now). Returns the quarantine's end.
  int64_t BecomeActive(uint64_t term, int64_t credit_ms = 0);

  Stats GetStats() const;
  std::vector<proto::SegmentInfo> ListSegments() const { return segments_.List(); }
  // The nodes with a session: their segments and what their heartbeats report.
  struct NodeInfo {
    SessionTable::NodeView session;
    std::vector<proto::SegmentInfo> segments;  // used filled in, as ListSegments
  };
  std::vector<NodeInfo> ListNodes() const;
  // The mounted tenant pools (placement.h), by tenant.
  std::vector<SegmentRegistry::PoolTotals> ListPools() const { return segments_.Pools(); }
  // Frees `bytes` (at least) by evicting least-recently-used complete, unleased objects;
  // tenants over quota or closed to admission first. Returns the bytes freed.
  uint64_t Evict(uint64_t bytes, const char* reason) { return evictor_.Evict(bytes, reason); }
  const MasterOptions& options() const { return options_; }
  int64_t NowMs() const { return clock_->NowMs(); }
  // Per-tenant byte accounting. The TenantManager applies policies to it.
  tenant::QuotaLedger* ledger() { return &ledger_; }
  // The shared capacity of every tier (placement.h): what quotas are scaled against. A
  // tenant's byte quota covers its bytes on every tier.
  uint64_t capacity() const {
    return evictor_.SharedCapacity(proto::Tier::kHost).capacity +
           evictor_.SharedCapacity(proto::Tier::kGpu).capacity;
  }
  // What eviction freed on a tier since start.
  SegmentRegistry::Evictions Evicted(proto::Tier tier) const { return segments_.Evicted(tier); }
  // Bytes one replica of a value of this size occupies: header + value, aligned.
  static uint64_t AllocBytes(uint64_t value_size) { return master::AllocBytes(value_size); }

 private:
  // Resolves the session's tenant and runs f(tenant), or answers with the session's error.
  template <typename Reply, typename F>
  Reply ForTenant(SessionId sid, F&& f);
  // Unmounts segments, drops their replicas and rescales the quotas. Returns the generations of
  // the complete objects that had a replica there (ObjectStore::DropSegments).
  absl::flat_hash_set<uint64_t> DropSegments(const std::vector<uint64_t>& segment_ids);
  // After a mount or unmount: the shared capacity and the pooled tenants to the ledger.
  void RescaleQuotas();

  // Declaration order is construction order: the shared state first, then the parts that
  // point into it.
  const MasterOptions options_;
  common::Clock* clock_;
  const std::string master_id_;
  MasterCounters counters_;
  SegmentRegistry segments_;
  tenant::QuotaLedger ledger_;
  TimerWheel deadlines_;
  InventoryOutbox outbox_;
  ObjectShards shards_;
  SessionTable sessions_;
  Evictor evictor_;
  ObjectStore objects_;
  CopyCoordinator copies_;
  InventoryRestore restore_;
  // Node sessions this master dropped (a partition or a death), by node id: when the node was
  // last heard from (how long one that comes back was gone) and the generations of the objects
  // it held then (the only ones its report may restore: InventoryRestore::ExpectOnly). Entries
  // older than 15 minutes are pruned at each drop; a node id in mounted_nodes_ without an entry
  // then restores nothing.
  struct DroppedNode {
    int64_t last_seen_ms = 0;
    std::shared_ptr<const absl::flat_hash_set<uint64_t>> held;
  };
  granary::common::Mutex dropped_mu_;
  absl::flat_hash_map<std::string, DroppedNode> dropped_nodes_ ABSL_GUARDED_BY(dropped_mu_);
  // Every node id that mounted a segment at this master (a node process has one id), and the
  // session of its latest mount.
  absl::flat_hash_map<std::string, SessionId> mounted_nodes_ ABSL_GUARDED_BY(dropped_mu_);
  common::MetricGauge* quarantined_bytes_;
};

}  // namespace granary::master
