#include "master/session_table.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "master/tenant/quota_ledger.h"

namespace granary::master {

namespace {
proto::WireStatus Err(const absl::Status& s) { return proto::WireStatus::From(s); }

absl::Status NoSession() { return absl::FailedPreconditionError("no session: send Hello first"); }
}  // namespace

SessionTable::SessionTable(const MasterOptions& options, common::Clock* clock,
                           MasterCounters* counters)
    : options_(options),
      clock_(clock),
      counters_(counters),
      token_check_({}, options.require_tenant_tokens, nullptr) {}

proto::HelloReply SessionTable::Hello(SessionId sid, const proto::HelloRequest& req,
                                      const std::string& master_id) {
  proto::HelloReply rep;
  // The newest version the peer speaks: a newer one is served in this master's (the
  // connection's handshake agreed on it), an older one only inside this master's window.
  if (req.protocol_version < proto::kMinProtocolVersion) {
    rep.status = Err(absl::FailedPreconditionError(
        absl::StrCat("protocol version ", req.protocol_version, " is not supported (master speaks ",
                     proto::VersionRange(), ")")));
    return rep;
  }
  if (req.role == proto::Role::kClient) {
    absl::Status st = tenant::ValidateTenantId(req.tenant_id);
    if (!st.ok()) {
      rep.status = Err(st);
      return rep;
    }
    // Names the tenant, never the token (nor its hash).
    st = token_check_.Check(req.tenant_id, req.token);
    if (!st.ok()) {
      counters_->hello_rejects_token->Inc();
      GRANARY_LOG_WARN << "session " << sid << " hello refused: " << st.message() << " (client "
                       << req.client_id << ")";
      rep.status = Err(st);
      return rep;
    }
  }
  granary::common::MutexLock lock(&mu_);
  if (sessions_.contains(sid)) {
    rep.status = Err(absl::FailedPreconditionError("session already said Hello"));
    return rep;
  }
  Session& s = sessions_[sid];
  s.role = req.role;
  s.tenant = req.tenant_id;
  s.client_id = req.client_id;
  s.last_seen_ms = clock_->NowMs();
  rep.session_id = sid;
  rep.heartbeat_interval_ms =
      static_cast<uint32_t>(std::max<int64_t>(options_.client_ttl_ms / 4, 50));
  rep.master_id = master_id;
  rep.write_window_ms = static_cast<uint32_t>(options_.WriteWindowMs());
  GRANARY_LOG_DEBUG << "session " << sid << " hello: role=" << static_cast<int>(req.role)
                    << " tenant=" << req.tenant_id << " client=" << req.client_id;
  return rep;
}

SessionId SessionTable::OpenInternal(const std::string& reserved_tenant) {
  GRANARY_CHECK(tenant::QuotaLedger::IsReserved(reserved_tenant)) << reserved_tenant;
  static std::atomic<SessionId> next{1ull << 62};  // far from the adapter's connection ids
  SessionId sid = next.fetch_add(1);
  granary::common::MutexLock lock(&mu_);
  Session& s = sessions_[sid];
  s.role = proto::Role::kClient;
  s.tenant = reserved_tenant;
  s.client_id = "master";
  s.internal = true;
  s.last_seen_ms = clock_->NowMs();
  return sid;
}

absl::Status SessionTable::Touch(SessionId sid, bool need_node) {
  granary::common::MutexLock lock(&mu_);
  auto it = sessions_.find(sid);
  if (need_node && (it == sessions_.end() || it->second.role != proto::Role::kNode)) {
    return absl::FailedPreconditionError("MountSegment needs a node session");
  }
  if (it == sessions_.end()) return NoSession();
  it->second.last_seen_ms = clock_->NowMs();
  return absl::OkStatus();
}

absl::Status SessionTable::Heartbeat(SessionId sid, const proto::HeartbeatRequest& req) {
  granary::common::MutexLock lock(&mu_);
  auto it = sessions_.find(sid);
  if (it == sessions_.end()) return NoSession();
  Session& s = it->second;
  s.last_seen_ms = clock_->NowMs();
  if (s.role != proto::Role::kNode) return absl::OkStatus();  // a client has no cgroup to tell
  if (req.has_cgroup) {
    s.cgroup = req.cgroup;
  } else {
    s.cgroup.reset();
  }
  return absl::OkStatus();
}

std::vector<SessionTable::NodeView> SessionTable::Nodes() const {
  std::vector<NodeView> out;
  {
    granary::common::MutexLock lock(&mu_);
    for (const auto& [sid, s] : sessions_) {
      if (s.role == proto::Role::kNode) {
        out.push_back(NodeView{sid, s.client_id, s.last_seen_ms, s.cgroup});
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const NodeView& a, const NodeView& b) { return a.sid < b.sid; });
  return out;
}

absl::StatusOr<std::string> SessionTable::TenantOf(SessionId sid, bool touch) {
  granary::common::MutexLock lock(&mu_);
  auto it = sessions_.find(sid);
  if (it == sessions_.end()) return NoSession();
  if (touch) it->second.last_seen_ms = clock_->NowMs();
  // A node session binds no (validated) tenant: object requests from it would act in a
  // namespace no client can see, or in the master's reserved '_' one.
  if (it->second.role != proto::Role::kClient) {
    return absl::FailedPreconditionError("object requests need a client session");
  }
  return it->second.tenant;
}

void SessionTable::AddInFlight(SessionId sid, std::vector<std::string> table_keys) {
  if (table_keys.empty()) return;
  granary::common::MutexLock lock(&mu_);
  auto it = sessions_.find(sid);
  if (it == sessions_.end()) return;
  for (auto& k : table_keys) it->second.in_flight.insert(std::move(k));
}

void SessionTable::ForgetInFlight(SessionId sid, const std::string& table_key) {
  granary::common::MutexLock lock(&mu_);
  auto it = sessions_.find(sid);
  if (it != sessions_.end()) it->second.in_flight.erase(table_key);
}

void SessionTable::ForgetCommitted(
    const std::vector<std::pair<SessionId, std::string>>& committed) {
  if (committed.empty()) return;
  granary::common::MutexLock lock(&mu_);
  for (const auto& [writer, tk] : committed) {
    auto it = sessions_.find(writer);
    if (it != sessions_.end()) it->second.in_flight.erase(tk);
  }
}

std::optional<SessionTable::Session> SessionTable::Remove(SessionId sid) {
  granary::common::MutexLock lock(&mu_);
  auto it = sessions_.find(sid);
  if (it == sessions_.end()) return std::nullopt;
  Session s = std::move(it->second);
  sessions_.erase(it);
  return s;
}

std::vector<SessionId> SessionTable::Expired(int64_t now_ms) const {
  std::vector<SessionId> dead;
  granary::common::MutexLock lock(&mu_);
  for (const auto& [sid, s] : sessions_) {
    if (!s.internal && now_ms - s.last_seen_ms > options_.client_ttl_ms) dead.push_back(sid);
  }
  return dead;
}

size_t SessionTable::size() const {
  granary::common::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace granary::master
