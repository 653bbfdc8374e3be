#include "master/admin_http.h"

#include <httplib.h>

#include <algorithm>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "master/admin_body.h"
#include "master/dashboard.h"
#include "master/master_service.h"
#include "master/placement.h"
#include "master/tenant/tenant_manager.h"

namespace granary::master {

namespace {

using nlohmann::json;

// Never throws: a string that is not UTF-8 (a key, a name a node sent) is written with U+FFFD
// for its bad bytes. Values the API shows on purpose are escaped before (Shown).
void SendJson(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// A name or key as the API shows it: unchanged when it is UTF-8, else with its bad bytes as
// \xNN (and backslashes doubled) so that it stays distinguishable (common/utf8.h).
std::string Shown(const std::string& s) { return common::EscapeInvalidUtf8(s); }

void SendError(httplib::Response& res, int status, const std::string& code,
               const std::string& message) {
  SendJson(res, status, {{"success", false}, {"error", {{"code", code}, {"message", message}}}});
}

// Maps a Status to the API's HTTP status and error code: the name of its ErrorReason when it
// has one ("TENANT_NOT_EMPTY"), else the name of its status code.
void SendStatus(httplib::Response& res, const absl::Status& st) {
  const ErrorReason reason = ErrorReasonOf(st);
  std::string code =
      reason == ErrorReason::kNone ? absl::StatusCodeToString(st.code()) : ErrorReasonName(reason);
  int http = 500;
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
      http = 400;
      break;
    case absl::StatusCode::kNotFound:
      http = 404;
      break;
    case absl::StatusCode::kFailedPrecondition:
      http = 409;
      break;
    case absl::StatusCode::kUnavailable:
      http = 503;
      break;
    case absl::StatusCode::kUnauthenticated:
      http = 401;
      break;
    default:
      break;
  }
  SendError(res, http, code, std::string(st.message()));
}

// A node's memory cgroup as its last heartbeat reported it (the names the dashboard reads).
json CgroupJson(const proto::NodeCgroupReport& c) {
  return {{"path", c.path},
          {"version", c.version},
          {"memory_limit_bytes", c.limit},
          {"memory_effective_limit_bytes", c.effective_limit},
          {"memory_usage_bytes", c.usage},
          {"memory_peak_bytes", c.peak},
          {"headroom_bytes", c.effective_limit > c.usage ? c.effective_limit - c.usage : 0},
          {"limit_hits", c.limit_hits},
          {"oom", c.oom},
          {"oom_kills", c.oom_kill}};
}

json PoolJson(const SegmentRegistry::PoolTotals& p) {
  return {{"tenant_id", Shown(p.tenant)},
          {"capacity_bytes", p.totals.capacity},
          {"used_bytes", p.totals.used},
          {"segments", p.totals.segments}};
}

// The tenant's mounted pool (placement.h), or null.
json PoolOf(const std::vector<SegmentRegistry::PoolTotals>& pools, const std::string& tenant) {
  for (const auto& p : pools) {
    if (p.tenant == tenant) return PoolJson(p);
  }
  return nullptr;
}

// has_token: whether the tenant's clients must present a token. The hash itself is never
// shown. `pool`: its pool's figures, or null.
json Snapshot(const tenant::TenantSnapshot& s, bool has_token, json pool) {
  json j = {{"tenant_id", Shown(s.tenant_id)},
            {"requested_quota_bytes", s.requested_quota_bytes},
            {"effective_quota_bytes", s.effective_quota_bytes},
            {"charged_bytes", s.charged_bytes},
            {"inflight_bytes", s.inflight_bytes},
            {"entries", s.entries},
            {"evicted_objects", s.evicted_objects},
            {"evicted_bytes", s.evicted_bytes},
            {"admission_closed", s.admission_closed},
            {"over_quota", s.over_quota},
            {"has_explicit_policy", s.has_explicit_policy},
            {"has_token", has_token},
            {"pool_spill", s.pool_spill},
            {"default_tier", common::TierPreferenceName(s.default_tier)}};
  j["max_entries"] = s.max_entries.has_value() ? json(*s.max_entries) : json(nullptr);
  j["pool"] = std::move(pool);
  return j;
}

// Liveness, role and metrics: /health (?deep=1 runs the probe), /role, /metrics.
void AddStatusRoutes(common::HttpServer& s, MasterService* service, tenant::TenantManager* tenants,
                     common::MetricsRegistry* metrics, std::function<bool()> is_active,
                     std::function<absl::StatusOr<std::pair<double, std::string>>()> probe,
                     std::function<RoleDetail()> role_detail) {
  s.Get("/health", [=](const httplib::Request& req, httplib::Response& res) {
    auto st = service->GetStats();
    absl::Status store = tenants->store_status();
    json j = {{"status", store.ok() ? "ok" : "degraded"},
              {"role", is_active() ? "active" : "standby"},
              {"segments", st.segments},
              {"objects", st.objects},
              {"multi_tenant", tenants->enabled()},
              {"policy_store", tenants->store_description()},
              {"policy_store_ok", store.ok()}};
    if (!store.ok()) j["policy_store_error"] = std::string(store.message());
    if (req.has_param("deep") && req.get_param_value("deep") == "1" && probe) {
      auto r = probe();
      if (r.ok()) {
        j["deep"] = {{"ok", true}, {"round_trip_us", r->first}, {"node", r->second}};
      } else {
        j["status"] = "failing";
        j["deep"] = {{"ok", false}, {"error", std::string(r.status().message())}};
        SendJson(res, 503, j);
        return;
      }
    }
    SendJson(res, 200, j);
  });
  // {"role": "active"|"standby", "ha": bool, "epoch": N, "active": {"rpc", "admin"}}: with HA,
  // the active master as this one last saw it (absent when none is known).
  s.Get("/role", [=](const httplib::Request&, httplib::Response& res) {
    json j = {{"role", is_active() ? "active" : "standby"}};
    const RoleDetail d = role_detail ? role_detail() : RoleDetail{};
    j["ha"] = d.ha;
    j["epoch"] = d.epoch;
    if (!d.active_rpc.empty() || !d.active_admin.empty()) {
      j["active"] = {{"rpc", d.active_rpc}, {"admin", d.active_admin}};
    }
    SendJson(res, 200, j);
  });
  s.Get("/metrics", [=](const httplib::Request&, httplib::Response& res) {
    std::string text = metrics->Render();
    absl::Status store = tenants->store_status();
    absl::StrAppend(&text,
                    "# HELP granary_tenant_policy_store_up 1 when the quota policy store was "
                    "readable at the last attempt\n# TYPE granary_tenant_policy_store_up gauge\n"
                    "granary_tenant_policy_store_up ",
                    store.ok() ? 1 : 0, "\n");
    res.set_content(text, "text/plain; version=0.0.4");
  });
}

// Read-only views of the store's segments: /get_all_segments and /api/v1/segments.
void AddSegmentRoutes(common::HttpServer& s, MasterService* service) {
  // Mooncake's master path, which SGLang polls until its body is non-empty: one mounted
  // segment's name per line; an empty body while none is mounted.
  s.Get("/get_all_segments", [=](const httplib::Request&, httplib::Response& res) {
    std::string body;
    for (const auto& seg : service->ListSegments()) absl::StrAppend(&body, seg.name, "\n");
    res.set_content(body, "text/plain");
  });
  s.Get("/api/v1/segments", [=](const httplib::Request&, httplib::Response& res) {
    // The cgroup of each node that reports one (the dashboard's cgroup column).
    std::map<std::string, json> cgroups;
    for (const auto& n : service->ListNodes()) {
      if (n.session.cgroup.has_value()) cgroups[n.session.node_id] = CgroupJson(*n.session.cgroup);
    }
    json arr = json::array();
    // Capacity and use per tier, every tier listed (zero when none of it is mounted).
    json tiers = json::object();
    for (proto::Tier t : proto::kTiers) {
      const SegmentRegistry::Evictions e = service->Evicted(t);
      tiers[TierName(t)] = {{"segments", 0},
                            {"size_bytes", 0},
                            {"used_bytes", 0},
                            {"evicted_objects", e.objects},
                            {"evicted_bytes", e.bytes}};
    }
    for (const auto& seg : service->ListSegments()) {
      arr.push_back({{"segment_id", seg.segment_id},
                     {"name", seg.name},
                     {"node_id", seg.node_id},
                     {"node_address", seg.node_address},
                     {"tier", TierName(seg.tier)},
                     {"pool", seg.pool},
                     {"size_bytes", seg.size},
                     {"used_bytes", seg.used},
                     {"nic", seg.nic},
                     {"numa_node", seg.numa_node},
                     {"gpu", seg.gpu}});
      if (auto it = cgroups.find(seg.node_id); it != cgroups.end())
        arr.back()["cgroup"] = it->second;
      if (seg.tier == proto::Tier::kGpu) {
        arr.back()["gpu_uuid"] = absl::BytesToHexString(seg.gpu_uuid);
      }
      json& t = tiers[TierName(seg.tier)];
      t["segments"] = t["segments"].get<uint64_t>() + 1;
      t["size_bytes"] = t["size_bytes"].get<uint64_t>() + seg.size;
      t["used_bytes"] = t["used_bytes"].get<uint64_t>() + seg.used;
    }
    json pools = json::array();
    for (const auto& p : service->ListPools()) pools.push_back(PoolJson(p));
    SendJson(res, 200, {{"success", true}, {"data", arr}, {"pools", pools}, {"tiers", tiers}});
  });
}

// /api/v1/nodes: the nodes with a session.
void AddNodeRoutes(common::HttpServer& s, MasterService* service) {
  // The nodes with a session: their segments (capacity, usage, pool) and, for a node under
  // --cgroup, the figures of its memory cgroup as its last heartbeat reported them.
  s.Get("/api/v1/nodes", [=](const httplib::Request&, httplib::Response& res) {
    const int64_t now = service->NowMs();
    json arr = json::array();
    for (const auto& n : service->ListNodes()) {
      uint64_t capacity = 0, used = 0;
      std::string address, pool;
      json segs = json::array();
      json topology = json::array();  // per segment: where it sits on the node's host
      for (const auto& seg : n.segments) {
        capacity += seg.size;
        used += seg.used;
        address = seg.node_address;
        if (!seg.pool.empty()) pool = seg.pool;
        segs.push_back(seg.segment_id);
        topology.push_back({{"segment_id", seg.segment_id},
                            {"name", seg.name},
                            {"nic", seg.nic},
                            {"numa_node", seg.numa_node},
                            {"gpu", seg.gpu}});
      }
      json node = {{"node_id", n.session.node_id},
                   {"node_address", address},
                   {"pool", pool},
                   {"segments", segs},
                   {"topology", topology},
                   {"capacity_bytes", capacity},
                   {"used_bytes", used},
                   {"last_heartbeat_ms_ago", std::max<int64_t>(0, now - n.session.last_seen_ms)}};
      node["cgroup"] = n.session.cgroup.has_value() ? CgroupJson(*n.session.cgroup) : json(nullptr);
      arr.push_back(std::move(node));
    }
    SendJson(res, 200, {{"success", true}, {"data", arr}});
  });
}

// /api/v1/objects: a read-only view of the store's objects.
void AddObjectRoutes(common::HttpServer& s, MasterService* service) {
  // Objects of one tenant: tenant_id is required (no cross-tenant listing), prefix and limit
  // optional, start_after for paging.
  s.Get("/api/v1/objects", [=](const httplib::Request& req, httplib::Response& res) {
    if (!req.has_param("tenant_id")) {
      SendError(res, 400, "INVALID_ARGUMENT", "the tenant_id query parameter is required");
      return;
    }
    std::string id = req.get_param_value("tenant_id");
    if (absl::Status st = tenant::ValidateTenantId(id); !st.ok()) {
      SendStatus(res, common::WithReason(st, ErrorReason::kInvalidTenantId));
      return;
    }
    proto::ListRequest lr;
    lr.prefix = req.get_param_value("prefix");
    lr.start_after = req.get_param_value("start_after");
    lr.limit = 1000;
    if (req.has_param("limit")) {
      const std::string l = req.get_param_value("limit");
      uint32_t v = 0;
      if (!absl::SimpleAtoi(l, &v) || v == 0 || v > proto::kMaxListLimit) {
        SendError(res, 400, "INVALID_ARGUMENT",
                  absl::StrCat("limit '", l, "' is not an integer in 1..", proto::kMaxListLimit));
        return;
      }
      lr.limit = v;
    }
    auto list = service->ListObjects(id, lr);
    json arr = json::array();
    for (const auto& o : list.objects) {
      arr.push_back({{"key", Shown(o.key)},
                     {"size", o.size},
                     {"generation", o.generation},
                     {"complete", o.state == proto::ObjectState::kComplete},
                     {"replicas", o.replica_count},
                     {"age_ms", o.age_ms},
                     {"placements", [&] {
                        json ps = json::array();
                        for (const auto& r : o.replicas) {
                          ps.push_back({{"segment_id", r.segment_id},
                                        {"offset", r.address},
                                        {"bytes", r.length}});
                        }
                        return ps;
                      }()}});
      // A key that is not UTF-8 (keys are bytes) is shown escaped, and exactly in hex.
      if (!common::IsValidUtf8(o.key)) arr.back()["key_hex"] = absl::BytesToHexString(o.key);
    }
    SendJson(res, 200, {{"success", true}, {"data", arr}, {"more", list.more}});
  });
}

// /api/v1/tenant_quotas: GET, PUT, DELETE.
void AddTenantQuotaRoutes(common::HttpServer& s, MasterService* service,
                          tenant::TenantManager* tenants, std::function<bool()> is_active,
                          AdminAuth auth) {
  // Tenant quota API. Every call needs the active master and multi-tenant mode.
  auto guard = [=](const httplib::Request& req, httplib::Response& res, bool needs_id,
                   std::string* id) -> bool {
    // Mutating calls need the bearer token when one is configured.
    if (req.method != "GET" && !auth.Allows(req.get_header_value("Authorization"))) {
      res.set_header("WWW-Authenticate", "Bearer");
      SendError(res, 401, "UNAUTHENTICATED",
                "this call needs 'Authorization: Bearer <token>' (--admin_token_file)");
      return false;
    }
    if (!is_active()) {
      SendStatus(res, common::WithReason(
                          absl::UnavailableError(
                              "NOT_ACTIVE: this master is a standby (or fenced itself); ask the "
                              "active master (GET /role names it)"),
                          ErrorReason::kNotActive));
      return false;
    }
    if (!tenants->enabled()) {
      SendStatus(res, common::WithReason(absl::FailedPreconditionError(
                                             "multi-tenant quota is off (start the master with "
                                             "--enable_multi_tenants)"),
                                         ErrorReason::kUnavailableInCurrentMode));
      return false;
    }
    if (req.has_param("tenant_id")) {
      *id = req.get_param_value("tenant_id");
      absl::Status st = tenant::ValidateTenantId(*id);
      if (!st.ok()) {
        SendStatus(res, common::WithReason(st, ErrorReason::kInvalidTenantId));
        return false;
      }
    } else if (needs_id) {
      SendError(res, 400, "INVALID_ARGUMENT", "the tenant_id query parameter is required");
      return false;
    }
    return true;
  };
  s.Get("/api/v1/tenant_quotas", [=](const httplib::Request& req, httplib::Response& res) {
    std::string id;
    if (!guard(req, res, false, &id)) return;
    tenant::QuotaLedger* ledger = service->ledger();
    const std::vector<SegmentRegistry::PoolTotals> pools = service->ListPools();
    if (!req.has_param("tenant_id")) {
      json arr = json::array();
      for (const auto& snap : ledger->SnapshotAll()) {
        arr.push_back(
            Snapshot(snap, service->TenantHasToken(snap.tenant_id), PoolOf(pools, snap.tenant_id)));
      }
      SendJson(res, 200, {{"success", true}, {"data", arr}});
      return;
    }
    auto snap = ledger->Snapshot(id);
    if (!snap.has_value()) {
      SendStatus(res, common::WithReason(
                          absl::NotFoundError(absl::StrCat("tenant '", id, "' is not known")),
                          ErrorReason::kTenantNotFound));
      return;
    }
    SendJson(res, 200,
             {{"success", true},
              {"data", Snapshot(*snap, service->TenantHasToken(id), PoolOf(pools, id))}});
  });
  s.Put("/api/v1/tenant_quotas", [=](const httplib::Request& req, httplib::Response& res) {
    std::string id;
    if (!guard(req, res, true, &id)) return;
    absl::StatusOr<QuotaBody> body = ParseQuotaBody(req.body);
    absl::Status st = body.status();
    if (st.ok())
      st =
          tenants->Upsert(id, body->quota, body->max_entries, body->pool_spill, body->default_tier);
    if (!st.ok()) {
      SendStatus(res, st);
      return;
    }
    auto snap = service->ledger()->Snapshot(id);
    SendJson(res, 200,
             {{"success", true},
              {"data",
               snap ? Snapshot(*snap, service->TenantHasToken(id), PoolOf(service->ListPools(), id))
                    : json(nullptr)}});
  });
  s.Delete("/api/v1/tenant_quotas", [=](const httplib::Request& req, httplib::Response& res) {
    std::string id;
    if (!guard(req, res, true, &id)) return;
    absl::Status st = tenants->Delete(id);
    if (!st.ok()) {
      SendStatus(res, st);
      return;
    }
    SendJson(res, 200, {{"success", true}, {"data", {{"tenant_id", id}, {"deleted", true}}}});
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<AdminHttp>> AdminHttp::Create(
    const std::string& host, uint16_t port, MasterService* service, tenant::TenantManager* tenants,
    common::MetricsRegistry* metrics, std::function<bool()> is_active,
    std::function<absl::StatusOr<std::pair<double, std::string>>()> probe, AdminAuth auth,
    std::function<RoleDetail()> role_detail) {
  common::HttpServerOptions http;
  http.metrics = metrics;
  http.lane_targets = {"/health", "/role"};  // answered while every worker is busy
  std::unique_ptr<AdminHttp> h(new AdminHttp(std::move(http)));
  common::HttpServer& s = h->http_;
  AddStatusRoutes(s, service, tenants, metrics, is_active, std::move(probe),
                  std::move(role_detail));
  AddSegmentRoutes(s, service);
  AddNodeRoutes(s, service);
  AddObjectRoutes(s, service);
  AddTenantQuotaRoutes(s, service, tenants, std::move(is_active), std::move(auth));
  AddDashboardRoutes(s);
  GRANARY_RETURN_IF_ERROR(h->http_.Start(host, port));
  return h;
}

}  // namespace granary::master
