#include "granary/client_options.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/size.h"
#include "common/util.h"
#include "proto/messages.h"

namespace granary {

namespace {

absl::StatusOr<uint64_t> SizeField(const nlohmann::json& v, const char* name) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_string()) {
    auto s = ParseSize(v.get<std::string>());
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", s.status().message()));
    return *s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      name, " must be a size (a number of bytes or a string like \"64MB\"), got ", v.dump()));
}

absl::StatusOr<int64_t> IntField(const nlohmann::json& v, const char* name) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    int64_t out = 0;
    if (absl::SimpleAtoi(v.get<std::string>(), &out)) return out;
  }
  return absl::InvalidArgumentError(absl::StrCat(name, " must be an integer, got ", v.dump()));
}

absl::StatusOr<std::string> StringField(const nlohmann::json& v, const char* name) {
  if (v.is_string()) return v.get<std::string>();
  return absl::InvalidArgumentError(absl::StrCat(name, " must be a string, got ", v.dump()));
}

}  // namespace

absl::StatusOr<ClientOptions> ClientOptions::FromJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open client config '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("client config '", path, "' is not valid JSON: ", e.what()));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("client config '", path, "' is not an object"));
  }
  ClientOptions o;
  auto wrap = [&](const absl::Status& st) {
    return absl::InvalidArgumentError(absl::StrCat("client config '", path, "': ", st.message()));
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const auto& v = it.value();
    absl::Status st;
    if (k == "master_server_address" || k == "master_server_addr") {
      auto s = StringField(v, k.c_str());
      if (s.ok())
        o.master_server_address = *s;
      else
        st = s.status();
    } else if (k == "tenant_id") {
      auto s = StringField(v, "tenant_id");
      if (s.ok())
        o.tenant_id = *s;
      else
        st = s.status();
    } else if (k == "tenant_token") {
      // A wrong type is named without its value: the value is a secret.
      if (v.is_string()) {
        o.tenant_token = v.get<std::string>();
      } else {
        st = absl::InvalidArgumentError(
            absl::StrCat("tenant_token must be a string, got a JSON ", v.type_name()));
      }
    } else if (k == "local_hostname") {
      auto s = StringField(v, "local_hostname");
      if (s.ok())
        o.local_hostname = *s;
      else
        st = s.status();
    } else if (k == "protocol") {
      auto s = StringField(v, "protocol");
      if (s.ok())
        o.protocol = *s;
      else
        st = s.status();
    } else if (k == "device_name" || k == "rdma_devices") {
      auto s = StringField(v, k.c_str());
      if (s.ok())
        o.device_name = *s;
      else
        st = s.status();
    } else if (k == "local_buffer_size") {
      auto s = SizeField(v, "local_buffer_size");
      if (s.ok())
        o.local_buffer_size = *s;
      else
        st = s.status();
    } else if (k == "replica_num") {
      auto s = IntField(v, "replica_num");
      if (s.ok())
        o.replica_num = static_cast<int>(*s);
      else
        st = s.status();
    } else if (k == "rpc_timeout_ms") {
      auto s = IntField(v, "rpc_timeout_ms");
      if (s.ok())
        o.rpc_timeout_ms = *s;
      else
        st = s.status();
    } else if (k == "transfer_timeout_ms") {
      auto s = IntField(v, "transfer_timeout_ms");
      if (s.ok())
        o.transfer_timeout_ms = *s;
      else
        st = s.status();
    } else if (k == "get_retries") {
      auto s = IntField(v, "get_retries");
      if (s.ok())
        o.get_retries = static_cast<int>(*s);
      else
        st = s.status();
    } else {
      o.unknown_keys.push_back(k);
    }
    if (!st.ok()) return wrap(st);
  }
  if (!o.unknown_keys.empty()) {
    LOG_WARN << "client config '" << path << "': ignoring keys this version does not use: "
             << absl::StrJoin(o.unknown_keys, ", ");
  }
  absl::Status st = o.Validate();
  if (!st.ok()) return wrap(st);
  return o;
}

absl::StatusOr<ClientOptions> ClientOptions::FromEnvironment() {
  if (const char* path = std::getenv("GRANARY_CONFIG_PATH"); path != nullptr && *path != '\0') {
    return FromJsonFile(path);
  }
  ClientOptions o;
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };
  auto bad = [](const char* name, const char* v, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", v, "': ", why));
  };
  if (auto v = env("GRANARY_MASTER")) o.master_server_address = v;
  if (auto v = env("GRANARY_TENANT_ID")) o.tenant_id = v;
  if (auto v = env("GRANARY_TENANT_TOKEN")) o.tenant_token = v;
  if (auto v = env("GRANARY_LOCAL_HOSTNAME")) o.local_hostname = v;
  if (auto v = env("GRANARY_PROTOCOL")) o.protocol = v;
  if (auto v = env("GRANARY_DEVICE_NAME")) o.device_name = v;
  if (auto v = env("GRANARY_LOCAL_BUFFER_SIZE")) {
    auto s = ParseSize(v);
    if (!s.ok()) return bad("GRANARY_LOCAL_BUFFER_SIZE", v, s.status().message());
    o.local_buffer_size = *s;
  }
  if (auto v = env("GRANARY_REPLICA_NUM")) {
    if (!absl::SimpleAtoi(v, &o.replica_num))
      return bad("GRANARY_REPLICA_NUM", v, "not an integer");
  }
  if (auto v = env("GRANARY_RPC_TIMEOUT_MS")) {
    if (!absl::SimpleAtoi(v, &o.rpc_timeout_ms)) {
      return bad("GRANARY_RPC_TIMEOUT_MS", v, "not an integer");
    }
  }
  absl::Status st = o.Validate();
  if (!st.ok()) return st;
  return o;
}

absl::Status ClientOptions::Validate() const {
  auto hp = ParseHostPort(master_server_address);
  if (!hp.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("master_server_address: ", hp.status().message()));
  }
  if (protocol != "ucx" && protocol != "tcp" && protocol != "rdma") {
    return absl::InvalidArgumentError(absl::StrCat(
        "protocol '", protocol, "' is not one of ucx, tcp, rdma (UCX picks the transport)"));
  }
  if (replica_num < 1 || replica_num > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica_num ", replica_num, " is outside 1..8"));
  }
  if (rpc_timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rpc_timeout_ms ", rpc_timeout_ms, " must be positive"));
  }
  if (transfer_timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer_timeout_ms ", transfer_timeout_ms, " must be positive"));
  }
  if (get_retries < 0) {
    return absl::InvalidArgumentError(absl::StrCat("get_retries ", get_retries, " is negative"));
  }
  if (tenant_id.empty()) return absl::InvalidArgumentError("tenant_id must not be empty");
  if (tenant_token.size() > proto::kMaxTokenBytes) {
    // Its length, never its content.
    return absl::InvalidArgumentError(absl::StrCat("tenant_token is ", tenant_token.size(),
                                                   " bytes, limit ", proto::kMaxTokenBytes));
  }
  return absl::OkStatus();
}

}  // namespace granary
