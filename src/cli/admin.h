#pragma once

// The CLI's admin commands (docs/architecture.md section 11): `tenants`, `tenants set`,
// `tenants rm`, `nodes` and `health`, over the master's admin HTTP API. They need no master
// session (no UCX, no tenant): one HTTP request each, so they also work on a master whose RPC
// port is unreachable or that has no nodes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace granary::cli {

// Exit statuses of every granary command: 0 success, 1 not found or refused, 2 bad usage or
// the master (or its admin API) cannot be reached.
inline constexpr int kOk = 0, kRefused = 1, kUsage = 2;

// Where the admin API is, and the bearer token mutating calls present (empty: none).
struct AdminTarget {
  std::string host;
  uint16_t port = 0;
  std::string token;
};

// `admin` ("HOST:PORT", or empty for the master's host and port 9003, the master's default
// --metrics_port) and `token_file` (empty: no token; else the file's content without the
// surrounding whitespace, which must not be empty). INVALID_ARGUMENT naming the bad value.
[[nodiscard]] absl::StatusOr<AdminTarget> ResolveAdminTarget(const std::string& admin,
                                                             const std::string& master_address,
                                                             const std::string& token_file);

// One call: `method` GET, PUT or DELETE on `path` (with its query). The reply's JSON `data`
// on success. On an API error the status carries the HTTP status's code and the message
// "<API code>: <API message>" (for example "TENANT_NOT_EMPTY: ..."); UNAVAILABLE when nothing
// answers at the address (the message names it). /health and /role carry their fields at the
// top level, and /health?deep=1 answers a failing probe with 503 and the health object:
// `any_status` returns such an object whatever the HTTP status.
[[nodiscard]] absl::StatusOr<nlohmann::json> AdminCall(const AdminTarget& target,
                                                       const std::string& method,
                                                       const std::string& path,
                                                       const std::string& body = "",
                                                       bool any_status = false);

// What `tenants set` sends: --quota and the optional --max_entries, --pool_spill and
// --default_tier, already parsed.
struct TenantSetting {
  uint64_t quota_bytes = 0;
  std::optional<uint64_t> max_entries;
  std::optional<bool> pool_spill;           // absent: the tenant keeps what it has
  std::optional<std::string> default_tier;  // host, gpu, any or disk; absent: kept
};

// The commands; each prints its table or result on stdout, errors on stderr, and returns the
// exit status. `args` are the command's arguments after its name, already counted.
int RunTenants(const AdminTarget& target, const std::vector<std::string>& args,
               const std::optional<TenantSetting>& setting);
int RunNodes(const AdminTarget& target);
int RunHealth(const AdminTarget& target, bool deep);

// The tables, from the API's JSON (exposed for the unit test).
std::string FormatTenantTable(const nlohmann::json& snapshots);
std::string FormatNodeTable(const nlohmann::json& segments);

}  // namespace granary::cli
