#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "master/master_metrics.h"
#include "master/master_options.h"
#include "master/object.h"
#include "master/tenant/tenant_tokens.h"
#include "proto/messages.h"

namespace granary::master {

// The master's sessions: hello (protocol version, tenant id and token check), heartbeat, the
// liveness clock, and each client session's puts in flight (table keys), which the session's
// death frees. It decides nothing about objects: MasterService frees what Remove hands back.
//
// Owned by MasterService; `clock` and `counters` must outlive it. Thread-safe: one mutex over
// the map, a leaf (nothing else is locked under it, and it is never taken under another master
// lock). Every call is one hash lookup except Expired (a scan, once per tick).
class SessionTable {
 public:
  struct Session {
    proto::Role role = proto::Role::kClient;
    std::string tenant;
    std::string client_id;
    int64_t last_seen_ms = 0;
    bool internal = false;                       // the master's own session: never expires
    absl::flat_hash_set<std::string> in_flight;  // table keys with a put in progress
    // A node's: its cgroup as its last heartbeat reported it (none outside --cgroup).
    std::optional<proto::NodeCgroupReport> cgroup;
  };
  // A node session, for the admin API's /api/v1/nodes.
  struct NodeView {
    SessionId sid = 0;
    std::string node_id;
    int64_t last_seen_ms = 0;
    std::optional<proto::NodeCgroupReport> cgroup;
  };

  SessionTable(const MasterOptions& options, common::Clock* clock, MasterCounters* counters);

  // A client hello must pass the token check, else UNAUTHENTICATED; node hellos are not
  // checked.
  proto::HelloReply Hello(SessionId sid, const proto::HelloRequest& req,
                          const std::string& master_id);
  // Installs the client credential check. Not thread-safe against Hello: call before the
  // service is shared.
  void SetTokenCheck(tenant::TokenCheck check) { token_check_ = std::move(check); }
  bool TenantHasToken(const std::string& tenant) const {
    return token_check_.ExpectedHash(tenant).has_value();
  }
  // A session of the master's own, for a reserved tenant: no Hello, never expires.
  SessionId OpenInternal(const std::string& reserved_tenant);

  // Marks the session alive. FAILED_PRECONDITION when it never said Hello, or (when
  // `need_node`) is not a node's.
  [[nodiscard]] absl::Status Touch(SessionId sid, bool need_node = false);
  // A heartbeat: Touch, and for a node the cgroup figures it carries (kept until the next).
  [[nodiscard]] absl::Status Heartbeat(SessionId sid, const proto::HeartbeatRequest& req);
  // The node sessions, by session id.
  std::vector<NodeView> Nodes() const;
  // Validates a client session (touching it when `touch`) and returns its tenant.
  [[nodiscard]] absl::StatusOr<std::string> TenantOf(SessionId sid, bool touch = true);

  // In-flight puts: added at PutStart, dropped at PutEnd (commit) or abort.
  void AddInFlight(SessionId sid, std::vector<std::string> table_keys);
  void ForgetInFlight(SessionId sid, const std::string& table_key);
  void ForgetCommitted(const std::vector<std::pair<SessionId, std::string>>& committed);

  // Removes the session and returns it (its in-flight keys for the caller to free).
  std::optional<Session> Remove(SessionId sid);
  // Sessions silent for longer than client_ttl (internal ones never are).
  std::vector<SessionId> Expired(int64_t now_ms) const;
  size_t size() const;

 private:
  const MasterOptions& options_;
  common::Clock* clock_;
  MasterCounters* counters_;
  tenant::TokenCheck token_check_;  // written only before the service is shared
  mutable granary::common::Mutex mu_;
  absl::flat_hash_map<SessionId, Session> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace granary::master
