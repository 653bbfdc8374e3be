#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/metrics.h"

namespace granary::master {

class MasterService;

// The master's HTTP side on --metrics_host:--metrics_port: /health, /metrics (Prometheus text),
// /api/v1/segments. Runs cpp-httplib's own thread pool; handlers only read thread-safe state.
class AdminHttp {
 public:
  static absl::StatusOr<std::unique_ptr<AdminHttp>> Create(const std::string& host, uint16_t port,
                                                           MasterService* service,
                                                           MetricsRegistry* metrics);
  uint16_t port() const { return http_.port(); }

 private:
  AdminHttp() = default;
  HttpServer http_;
};

}  // namespace granary::master
