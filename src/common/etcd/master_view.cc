#include "common/etcd/master_view.h"

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace granary::etcd {

std::optional<std::string> EndpointsOfMasterAddress(const std::string& master) {
  absl::string_view s = master;
  if (!absl::ConsumePrefix(&s, "etcd://")) return std::nullopt;
  return absl::StrReplaceAll(s, {{";", ","}});
}

absl::Status ValidateMasterAddress(absl::string_view what, const std::string& master,
                                   const std::string& cluster_id) {
  std::optional<std::string> endpoints = EndpointsOfMasterAddress(master);
  if (!endpoints.has_value()) return absl::OkStatus();
  auto parsed = ParseEndpoints(*endpoints);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", master, "': ", parsed.status().message()));
  }
  if (cluster_id.empty() || cluster_id.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("cluster_id '", cluster_id,
                                                   "' must be non-empty and contain no '/' (with ",
                                                   what, " ", master, ")"));
  }
  return absl::OkStatus();
}

std::string MasterViewKey(const std::string& cluster_id) {
  return absl::StrCat("granary/", cluster_id, "/master_view");
}

absl::StatusOr<MasterView> ReadMasterView(EtcdClient* etcd, const std::string& cluster_id) {
  const std::string key = MasterViewKey(cluster_id);
  absl::StatusOr<RangeResult> view = etcd->Range(key);
  if (!view.ok()) return view.status();
  if (view->kvs.empty()) {
    return absl::UnavailableError(
        absl::StrCat("no active master in ", key, " at ", etcd->Describe(), " yet"));
  }
  const KeyValue& kv = view->kvs[0];
  nlohmann::json j = nlohmann::json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("rpc") || !j["rpc"].is_string()) {
    return absl::DataLossError(absl::StrCat(key, " holds no RPC address: '", kv.value, "'"));
  }
  const std::string admin =
      j.contains("admin") && j["admin"].is_string() ? j["admin"].get<std::string>() : "";
  return MasterView{j["rpc"].get<std::string>(), admin, kv.create_revision};
}

absl::Status EpochFence::Accept(int64_t epoch, absl::string_view who) {
  if (epoch == 0 || epoch >= highest_) {
    if (epoch > highest_) highest_ = epoch;
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(who, " answers for epoch ", epoch,
                                             ", older than epoch ", highest_,
                                             " already seen: a deposed master, refused"));
}

}  // namespace granary::etcd
