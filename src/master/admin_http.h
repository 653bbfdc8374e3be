#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "master/admin_auth.h"

namespace granary::master {

class MasterService;
namespace tenant {
class TenantManager;
}

// The master's HTTP side on --metrics_host:--metrics_port: the read-only dashboard at /
// (dashboard.h), /health, /role, /metrics
// (Prometheus text), /api/v1/segments, and the tenant quota API (docs/architecture.md section 5):
//   GET/PUT/DELETE /api/v1/tenant_quotas[?tenant_id=...]
// Served by common/http_server.h (its gate, limits and codes: docs/security.md); /health and
// /role have a thread of their own. Handlers only call thread-safe objects. is_active() is the
// role seam: a standby answers the endpoints that need the active master with 503.
// What /role says besides active|standby. epoch 0 and empty addresses: not known (or no HA).
struct RoleDetail {
  bool ha = false;
  int64_t epoch = 0;  // the active master's epoch
  std::string active_rpc;
  std::string active_admin;
};

class AdminHttp {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<AdminHttp>> Create(
      const std::string& host, uint16_t port, MasterService* service,
      tenant::TenantManager* tenants, common::MetricsRegistry* metrics,
      std::function<bool()> is_active,
      std::function<absl::StatusOr<std::pair<double, std::string>>()> probe = nullptr,
      AdminAuth auth = AdminAuth::None(), std::function<RoleDetail()> role_detail = nullptr);
  uint16_t port() const { return http_.port(); }

 private:
  explicit AdminHttp(common::HttpServerOptions options) : http_(std::move(options)) {}
  common::HttpServer http_;
};

}  // namespace granary::master
