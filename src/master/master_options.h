#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace granary::master {

// Everything granary_master can be told. Flags (main.cc) only fill this struct; Validate()
// rejects a present-but-invalid value, naming it.
struct MasterOptions {
  uint16_t rpc_port = 50051;  // RPC port for clients and nodes (0 = any free port)
  // The interface the RPC port binds (its handshake listener; transport/rpc_listener.h).
  std::string rpc_host = "0.0.0.0";
  uint16_t metrics_port = 9003;          // HTTP: /metrics, /health, /api/v1/... (0 = any)
  std::string metrics_host = "0.0.0.0";  // HTTP bind address
  std::string cluster_id = "granary_cluster";
  // Quota admission (strict mode): every write needs a tenant with a policy entry.
  bool enable_multi_tenants = false;
  std::string tenant_quota_connector_type = "file";  // file | etcd
  std::string tenant_quota_connector_uri;            // file path, or etcd host:port[,...]
  std::string admin_token_file;  // when set, mutating admin calls need this bearer token
  // Client credentials checked at hello (docs/security.md). A file of `<tenant> <sha256hex>`
  // lines; an entry overrides the policy's token_sha256 for that tenant. Read once at start.
  std::string tenant_tokens_file;
  // When true, a client hello for a tenant with no expected token hash is refused.
  bool require_tenant_tokens = false;
  int64_t client_ttl_ms = 10'000;         // a session silent this long is dead
  int64_t put_start_timeout_ms = 30'000;  // an allocation not committed by then is freed
  int64_t kv_lease_ttl_ms = 5'000;        // read lease granted by Get
  // The write window W: a client writes the allocations a PutStart
  // granted only until it sent that PutStart + W (its writes past then are cancelled and the put
  // fails with UNAVAILABLE, to be retried). Sent to clients in the hello. 0: the default,
  // min(2 s, put_start_timeout_ms); otherwise 100 ms..put_start_timeout_ms. 2 s is about 5 GB
  // at tcp speeds and tens of GB over RDMA for one put or batch; a longer transfer needs more.
  int64_t write_window_ms = 0;
  // After a restart or a takeover, space of re-mounted segments that no node inventory reported
  // stays out of allocation until start + the write window (the last moment a client of the
  // previous master may write) + this margin (clock drift, a transfer being cancelled).
  int64_t restart_quarantine_margin_ms = 500;
  // The space of a put (or copy) aborted before its commit (revoked, past its deadline, its
  // writer's session gone) stays out of allocation this long before it is reused: writes the
  // writer cancelled can still be queued in a tcp socket and land when a stalled link comes
  // back, which takes up to about twice as long as the link was down. A link down for longer
  // than client_ttl gets its node dropped and re-mounted with a quarantine of its own; so the
  // default, -1, holds for 2 x client_ttl + restart_quarantine_margin_ms. 0 frees at once.
  int64_t aborted_put_hold_ms = -1;
  int64_t AbortedPutHoldMs() const {
    return aborted_put_hold_ms >= 0 ? aborted_put_hold_ms
                                    : 2 * client_ttl_ms + restart_quarantine_margin_ms;
  }
  int64_t WriteWindowMs() const {
    return write_window_ms > 0 ? write_window_ms : std::min<int64_t>(2'000, put_start_timeout_ms);
  }
  double eviction_high_watermark_ratio = 0.9;  // evict when used/capacity exceeds this
  double eviction_ratio = 0.05;                // fraction of capacity one eviction round frees
  int64_t tick_ms = 50;                        // timer resolution (deadlines, heartbeats)
  // HA on etcd (docs/architecture.md, "High availability"): masters campaign for
  // granary/<cluster_id>/master_view; only the elected one admits mutating requests.
  bool enable_ha = false;
  std::string etcd_endpoints;    // host:port[,host:port...], required with enable_ha
  int64_t ha_lease_ttl_sec = 5;  // the leader's etcd lease; a standby takes over after it
  int64_t ha_margin_ms = 500;    // the leader stops admitting writes this long before the TTL
  // The host written into master_view with the RPC and admin ports (what clients and nodes
  // connect to). Empty: metrics_host unless it is a wildcard, else the machine's host name.
  std::string ha_advertise_host;

  [[nodiscard]] absl::Status Validate() const;
};

}  // namespace granary::master
