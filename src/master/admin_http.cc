#include "master/admin_http.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "master/master_service.h"

namespace granary::master {

namespace {
void SendJson(httplib::Response& res, int status, const nlohmann::json& j) {
  res.status = status;
  res.set_content(j.dump(), "application/json");
}
}  // namespace

absl::StatusOr<std::unique_ptr<AdminHttp>> AdminHttp::Create(const std::string& host,
                                                             uint16_t port, MasterService* service,
                                                             MetricsRegistry* metrics) {
  std::unique_ptr<AdminHttp> h(new AdminHttp());
  httplib::Server& s = h->http_.server();
  s.Get("/health", [service](const httplib::Request&, httplib::Response& res) {
    auto st = service->GetStats();
    SendJson(res, 200,
             {{"status", "ok"}, {"role", "active"}, {"segments", st.segments},
              {"objects", st.objects}});
  });
  s.Get("/role", [](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, {{"role", "active"}});
  });
  s.Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics->Render(), "text/plain; version=0.0.4");
  });
  s.Get("/api/v1/segments", [service](const httplib::Request&, httplib::Response& res) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& seg : service->ListSegments()) {
      arr.push_back({{"segment_id", seg.segment_id},
                     {"name", seg.name},
                     {"node_id", seg.node_id},
                     {"node_address", seg.node_address},
                     {"tier", seg.tier == proto::Tier::kGpu ? "gpu" : "host"},
                     {"pool", seg.pool},
                     {"size_bytes", seg.size},
                     {"used_bytes", seg.used}});
    }
    SendJson(res, 200, {{"success", true}, {"data", arr}});
  });
  absl::Status st = h->http_.Start(host, port);
  if (!st.ok()) return st;
  return h;
}

}  // namespace granary::master
