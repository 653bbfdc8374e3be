#include "cli/admin.h"

#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/size.h"
#include "common/util.h"

namespace granary::cli {
namespace {

using json = nlohmann::json;

// The admin API's default port: the master's --metrics_port default.
constexpr uint16_t kDefaultAdminPort = 9003;

// The absl code an API reply's HTTP status stands for (the inverse of the master's SendStatus).
absl::StatusCode CodeOfHttp(int http) {
  switch (http) {
    case 400:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 404:
      return absl::StatusCode::kNotFound;
    case 409:
      return absl::StatusCode::kFailedPrecondition;
    case 503:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

// Left-aligned text columns, each as wide as its widest cell, two spaces apart.
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line.append(width[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

// A count or a size; 0 when absent or not a non-negative integer.
std::optional<uint64_t> MaybeU64(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  int64_t v = it->get<int64_t>();
  return v >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(v)) : std::nullopt;
}

uint64_t U64(const json& j, const char* field) { return MaybeU64(j, field).value_or(0); }

bool Flag(const json& j, const char* field) {
  auto it = j.find(field);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

std::string Str(const json& j, const char* field) {
  auto it = j.find(field);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

int Fail(const std::string& what, const absl::Status& st) {
  std::cerr << "granary: " << what << ": " << st.message() << "\n";
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) ? kUsage : kRefused;
}

std::string TenantQuery(const std::string& tenant) {
  return absl::StrCat("/api/v1/tenant_quotas?tenant_id=",
                      httplib::detail::encode_query_param(tenant));
}

}  // namespace

absl::StatusOr<AdminTarget> ResolveAdminTarget(const std::string& admin,
                                               const std::string& master_address,
                                               const std::string& token_file) {
  AdminTarget t;
  if (admin.empty()) {
    auto master = common::ParseHostPort(master_address);
    if (!master.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no --admin given, and the master address '", master_address,
                       "' has no host to take it from: ", master.status().message()));
    }
    t.host = master->host;
    t.port = kDefaultAdminPort;
  } else {
    auto hp = common::ParseHostPort(admin);
    if (!hp.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--admin '", admin, "' is not HOST:PORT: ", hp.status().message()));
    }
    if (hp->port == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--admin '", admin, "' has port 0"));
    }
    t.host = hp->host;
    t.port = hp->port;
  }
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("--admin_token_file '", token_file, "' cannot be read"));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    // As the master reads its --admin_token_file: the final newline is not part of the token.
    t.token = std::string(absl::StripAsciiWhitespace(ss.str()));
    if (t.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--admin_token_file '", token_file, "' is empty"));
    }
  }
  return t;
}

absl::StatusOr<json> AdminCall(const AdminTarget& target, const std::string& method,
                               const std::string& path, const std::string& body, bool any_status) {
  const std::string where = absl::StrCat(target.host, ":", target.port);
  httplib::Client http(target.host, target.port);
  http.set_connection_timeout(5, 0);
  http.set_read_timeout(30, 0);
  httplib::Headers headers;
  if (!target.token.empty()) headers.emplace("Authorization", "Bearer " + target.token);
  auto send = [&]() -> httplib::Result {
    if (method == "PUT") return http.Put(path, headers, body, "application/json");
    if (method == "DELETE") return http.Delete(path, headers);
    return http.Get(path, headers);
  };
  if (method != "GET" && method != "PUT" && method != "DELETE") {
    return absl::InvalidArgumentError(absl::StrCat("HTTP method '", method, "' is not used"));
  }
  httplib::Result res = send();
  if (!res) {
    return absl::UnavailableError(absl::StrCat(
        "the admin API at ", where, " does not answer: ", httplib::to_string(res.error()),
        " (is the master up? --admin=HOST:PORT)"));
  }
  json reply = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (res->status >= 200 && res->status < 300 && reply.is_object() && Flag(reply, "success")) {
    return reply.contains("data") ? reply["data"] : reply;
  }
  if ((any_status || (res->status >= 200 && res->status < 300)) && reply.is_object() &&
      !reply.contains("success") && !reply.contains("error")) {
    return reply;  // /health and /role: their fields at the top level
  }
  if (reply.is_object() && reply.contains("error") && reply["error"].is_object()) {
    const json& e = reply["error"];
    return absl::Status(CodeOfHttp(res->status),
                        absl::StrCat(Str(e, "code"), ": ", Str(e, "message")));
  }
  return absl::Status(CodeOfHttp(res->status),
                      absl::StrCat("HTTP ", res->status, " from ", where, path,
                                   " (not Granary's admin API? --admin=HOST:PORT)"));
}

std::string FormatTenantTable(const json& snapshots) {
  std::vector<std::vector<std::string>> rows = {{"TENANT", "REQUESTED", "EFFECTIVE", "CHARGED",
                                                 "IN-FLIGHT", "ENTRIES", "MAX_ENTRIES", "FLAGS"}};
  for (const json& s : snapshots) {
    std::vector<std::string> flags;
    if (Flag(s, "admission_closed")) flags.push_back("closed");
    if (Flag(s, "over_quota")) flags.push_back("over-quota");
    if (Flag(s, "has_explicit_policy")) flags.push_back("policy");
    if (Flag(s, "has_token")) flags.push_back("token");
    if (Flag(s, "pool_spill")) flags.push_back("pool-spill");
    // The default tier when it is not host (older masters do not send it).
    if (s.contains("default_tier") && s["default_tier"].is_string() &&
        s["default_tier"] != "host") {
      flags.push_back(absl::StrCat("tier=", s["default_tier"].get<std::string>()));
    }
    std::optional<uint64_t> max = MaybeU64(s, "max_entries");
    rows.push_back({Str(s, "tenant_id"), common::FormatSize(U64(s, "requested_quota_bytes")),
                    common::FormatSize(U64(s, "effective_quota_bytes")),
                    common::FormatSize(U64(s, "charged_bytes")),
                    common::FormatSize(U64(s, "inflight_bytes")), absl::StrCat(U64(s, "entries")),
                    max.has_value() ? absl::StrCat(*max) : "-",
                    flags.empty() ? "-" : absl::StrJoin(flags, ",")});
  }
  return Table(rows);
}

std::string FormatNodeTable(const json& segments) {
  struct Node {
    std::string address, pool;
    std::set<std::string> tiers;
    std::set<std::string> nics, numa;  // where its segments sit (transport/topology.h)
    int segments = 0;
    uint64_t size = 0, used = 0;
  };
  std::vector<std::string> order;  // nodes in the order the API lists their first segment
  std::map<std::string, Node> nodes;
  for (const json& seg : segments) {
    const std::string id = Str(seg, "node_id");
    auto [it, fresh] = nodes.try_emplace(id);
    if (fresh) order.push_back(id);
    Node& n = it->second;
    n.address = Str(seg, "node_address");
    n.pool = Str(seg, "pool");
    n.tiers.insert(Str(seg, "tier"));
    if (!Str(seg, "nic").empty()) n.nics.insert(Str(seg, "nic"));
    auto numa = seg.find("numa_node");
    if (numa != seg.end() && numa->is_number_integer() && numa->get<int64_t>() >= 0) {
      n.numa.insert(absl::StrCat(numa->get<int64_t>()));
    }
    n.segments++;
    n.size += U64(seg, "size_bytes");
    n.used += U64(seg, "used_bytes");
  }
  std::vector<std::vector<std::string>> rows = {
      {"NODE", "ADDRESS", "SEGMENTS", "TIER", "POOL", "NIC", "NUMA", "SIZE", "USED", "USE"}};
  for (const std::string& id : order) {
    const Node& n = nodes[id];
    rows.push_back({id, n.address, absl::StrCat(n.segments), absl::StrJoin(n.tiers, ","),
                    n.pool.empty() ? "shared" : n.pool,
                    n.nics.empty() ? "ucx" : absl::StrJoin(n.nics, ","),
                    n.numa.empty() ? "-" : absl::StrJoin(n.numa, ","), common::FormatSize(n.size),
                    common::FormatSize(n.used),
                    n.size == 0 ? "-" : absl::StrFormat("%.1f%%", 100.0 * n.used / n.size)});
  }
  return Table(rows);
}

int RunTenants(const AdminTarget& target, const std::vector<std::string>& args,
               const std::optional<TenantSetting>& setting) {
  if (args.empty()) {
    auto r = AdminCall(target, "GET", "/api/v1/tenant_quotas");
    if (!r.ok()) return Fail("tenants", r.status());
    std::cout << FormatTenantTable(*r);
    return kOk;
  }
  const std::string& tenant = args[1];
  if (args[0] == "set") {
    json body = {{"requested_quota_bytes", setting->quota_bytes}};
    if (setting->max_entries.has_value()) body["max_entries"] = *setting->max_entries;
    if (setting->pool_spill.has_value()) body["pool_spill"] = *setting->pool_spill;
    if (setting->default_tier.has_value()) body["default_tier"] = *setting->default_tier;
    auto r = AdminCall(target, "PUT", TenantQuery(tenant), body.dump());
    if (!r.ok()) return Fail("tenants set '" + tenant + "'", r.status());
    std::cout << FormatTenantTable(json::array({*r}));
    if (const uint64_t effective = U64(*r, "effective_quota_bytes");
        effective < setting->quota_bytes) {
      // Quotas are shared out of the mounted capacity: a request above it counts as the
      // capacity, and requests that sum past it are scaled down (the master logs the numbers).
      std::cerr << "granary: note: tenant '" << tenant << "' requested "
                << common::FormatSize(setting->quota_bytes) << " but its effective quota is "
                << common::FormatSize(effective)
                << ": the cluster's shared capacity is smaller than what the tenants request\n";
    }
    return kOk;
  }
  auto r = AdminCall(target, "DELETE", TenantQuery(tenant));
  if (!r.ok()) return Fail("tenants rm '" + tenant + "'", r.status());
  std::cout << "tenant " << tenant << " deleted\n";
  return kOk;
}

int RunNodes(const AdminTarget& target) {
  auto r = AdminCall(target, "GET", "/api/v1/segments");
  if (!r.ok()) return Fail("nodes", r.status());
  std::cout << FormatNodeTable(*r);
  return kOk;
}

int RunHealth(const AdminTarget& target, bool deep) {
  auto r = AdminCall(target, "GET", deep ? "/health?deep=1" : "/health", "", true);
  if (!r.ok()) return Fail("health", r.status());
  const json& h = *r;
  std::cout << "status: " << Str(h, "status") << "\nrole: " << Str(h, "role")
            << "\nsegments: " << U64(h, "segments") << "\nobjects: " << U64(h, "objects")
            << "\nmulti_tenant: " << (Flag(h, "multi_tenant") ? "on" : "off")
            << "\npolicy_store: " << Str(h, "policy_store")
            << (Flag(h, "policy_store_ok") ? " (ok)" : " (" + Str(h, "policy_store_error") + ")")
            << "\n";
  if (h.contains("deep") && h["deep"].is_object()) {
    const json& d = h["deep"];
    if (Flag(d, "ok")) {
      std::cout << "deep: ok, round trip "
                << (d.contains("round_trip_us") && d["round_trip_us"].is_number()
                        ? absl::StrFormat("%.0f us", d["round_trip_us"].get<double>())
                        : std::string("?"))
                << " to " << Str(d, "node") << "\n";
    } else {
      std::cout << "deep: failing: " << Str(d, "error") << "\n";
    }
  }
  return Str(h, "status") == "ok" ? kOk : kRefused;
}

}  // namespace granary::cli
