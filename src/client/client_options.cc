#include "granary/client_options.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/etcd/master_view.h"
#include "common/log.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "proto/messages.h"

namespace granary {

namespace {

// How a field's value is written: in JSON, what it must be (a string may stand for a number);
// in the environment, always text. kRemoved: a key an older version read, reported by name.
enum class Kind { kString, kSecret, kInt, kLogLevel, kRemoved };

// Sets one field from its text; the error says what the text should have been ("must be ...").
using Setter = absl::Status (*)(ClientOptions* o, const std::string& text);

struct Field {
  const char* name;   // JSON key
  const char* alias;  // another JSON key for it (Mooncake's name), or null
  const char* env;    // environment variable, or null
  Kind kind;
  Setter set;
  const char* doc;  // one line on it (ClientOptions has the full comment); removed: why
};

template <auto field>
absl::Status SetString(ClientOptions* o, const std::string& text) {
  o->*field = text;
  return absl::OkStatus();
}

template <auto field>
absl::Status SetInt(ClientOptions* o, const std::string& text) {
  if (!absl::SimpleAtoi(text, &(o->*field))) {
    return absl::InvalidArgumentError("must be an integer");
  }
  return absl::OkStatus();
}

// The one table: FromJsonFile and FromEnvironment both read it, so a field added here is
// accepted by both.
constexpr Field kFields[] = {
    {"master_server_address", "master_server_addr", "GRANARY_MASTER", Kind::kString,
     SetString<&ClientOptions::master_server_address>,
     "host:port of the master, or etcd://h1:2379;h2:2379 (HA)"},
    {"cluster_id", nullptr, "GRANARY_CLUSTER_ID", Kind::kString,
     SetString<&ClientOptions::cluster_id>, "the HA cluster (with an etcd:// master)"},
    {"tenant_id", nullptr, "GRANARY_TENANT_ID", Kind::kString, SetString<&ClientOptions::tenant_id>,
     "the tenant of every key"},
    {"tenant_token", nullptr, "GRANARY_TENANT_TOKEN", Kind::kSecret,
     SetString<&ClientOptions::tenant_token>, "the tenant's client credential"},
    {"protocol", nullptr, "GRANARY_PROTOCOL", Kind::kString, SetString<&ClientOptions::protocol>,
     "ucx, tcp or rdma"},
    {"device_name", "rdma_devices", "GRANARY_DEVICE_NAME", Kind::kString,
     SetString<&ClientOptions::device_name>, "network devices for the data path (UCX names)"},
    {"gpu_device", nullptr, "GRANARY_GPU_DEVICE", Kind::kInt, SetInt<&ClientOptions::gpu_device>,
     "the GPU of the buffers: its nearest NIC is used"},
    {"replica_num", nullptr, "GRANARY_REPLICA_NUM", Kind::kInt, SetInt<&ClientOptions::replica_num>,
     "replicas per object"},
    {"rpc_timeout_ms", nullptr, "GRANARY_RPC_TIMEOUT_MS", Kind::kInt,
     SetInt<&ClientOptions::rpc_timeout_ms>, "control-plane timeout per request"},
    {"transfer_timeout_ms", nullptr, "GRANARY_TRANSFER_TIMEOUT_MS", Kind::kInt,
     SetInt<&ClientOptions::transfer_timeout_ms>, "timeout of one batch of transfers"},
    {"get_retries", nullptr, "GRANARY_GET_RETRIES", Kind::kInt, SetInt<&ClientOptions::get_retries>,
     "reads retried when a replica changed"},
    {"tcp_data_between_hosts", nullptr, "GRANARY_TCP_DATA_BETWEEN_HOSTS", Kind::kString,
     SetString<&ClientOptions::tcp_data_between_hosts>,
     "messages or one_sided: how values move to and from nodes on other hosts over tcp"},
    {"copy_threads", nullptr, "GRANARY_COPY_THREADS", Kind::kInt,
     SetInt<&ClientOptions::copy_threads>,
     "threads that share a large batch's same-host copies with the caller (0: none)"},
    {"log_level", nullptr, "GRANARY_LOG_LEVEL", Kind::kLogLevel,
     [](ClientOptions* o, const std::string& v) {
       LogLevel level;
       if (!common::ParseLogLevel(v, &level)) {
         return absl::InvalidArgumentError("must be one of debug, info, warning, error");
       }
       o->log_level = level;
       return absl::OkStatus();
     },
     "minimum level of the client's log lines"},
    {"local_buffer_size", nullptr, "GRANARY_LOCAL_BUFFER_SIZE", Kind::kRemoved, nullptr,
     "no staging buffer exists: unregistered memory is registered by UCX's own cache, and "
     "RegisterBuffer registers a buffer once"},
    {"local_hostname", nullptr, "GRANARY_LOCAL_HOSTNAME", Kind::kRemoved, nullptr,
     "the client never used it (a node's --local_hostname names the node)"},
};

const Field* FieldNamed(const std::string& key) {
  for (const Field& f : kFields) {
    if (key == f.name || (f.alias != nullptr && key == f.alias)) return &f;
  }
  return nullptr;
}

// A JSON value as the text its field's setter reads, or why it has the wrong type.
absl::StatusOr<std::string> JsonText(const Field& f, const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  switch (f.kind) {
    case Kind::kInt:
      if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
      return absl::InvalidArgumentError(absl::StrCat("must be an integer, got ", v.dump()));
    case Kind::kSecret:  // a wrong type is named without its value: the value is a secret
      return absl::InvalidArgumentError(
          absl::StrCat("must be a string, got a JSON ", v.type_name()));
    default:
      return absl::InvalidArgumentError(absl::StrCat("must be a string, got ", v.dump()));
  }
}

// An unknown key that names the master ("master", "master_addr", ...): refused, not ignored,
// since a client that ignored it would quietly use the default master instead.
bool NamesTheMaster(const std::string& key) { return absl::StartsWith(key, "master"); }

// The most a config file may hold: a larger one (or a device such as /dev/zero) is refused
// after this much, not read to its end.
constexpr size_t kMaxConfigBytes = 1u << 20;

std::string RemovedWarning(absl::string_view where, const Field& f) {
  return absl::StrCat(where, ": '", f.name, "' is no longer used and is ignored: ", f.doc);
}

}  // namespace

absl::StatusOr<ClientOptions> ClientOptions::FromJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open client config '", path, "'"));
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("client config '", path, "' holds more than ", kMaxConfigBytes, " bytes"));
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("client config '", path, "' is not valid JSON: ", e.what()));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("client config '", path, "' is not an object"));
  }
  const std::string where = absl::StrCat("client config '", path, "'");
  auto wrap = [&](const absl::Status& st) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", st.message()));
  };
  ClientOptions o;
  std::vector<std::string> unused;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const Field* f = FieldNamed(k);
    if (f == nullptr && NamesTheMaster(k)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": key '", common::EscapeUnprintable(k),
          "' is not a config key: the master's address goes in 'master_server_address' (as in "
          "Mooncake's config), e.g. \"master_server_address\": \"10.0.0.1:50051\""));
    }
    if (f == nullptr || f->kind == Kind::kRemoved) {
      if (f != nullptr) GRANARY_LOG_WARN << RemovedWarning(where, *f);
      if (f == nullptr) unused.push_back(k);
      o.unknown_keys.push_back(k);
      continue;
    }
    absl::StatusOr<std::string> text = JsonText(*f, it.value());
    absl::Status st = text.ok() ? f->set(&o, *text) : text.status();
    if (!st.ok()) return wrap(absl::Status(st.code(), absl::StrCat(k, " ", st.message())));
  }
  if (!unused.empty()) {
    GRANARY_LOG_WARN << where << ": ignoring keys this version does not use: "
                     << absl::StrJoin(unused, ", ");
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
  for (const Field& f : kFields) {
    const char* v = std::getenv(f.env);
    if (v == nullptr || *v == '\0') continue;
    if (f.kind == Kind::kRemoved) {
      GRANARY_LOG_WARN << RemovedWarning(absl::StrCat("environment variable ", f.env), f);
      continue;
    }
    absl::Status st = f.set(&o, v);
    if (st.ok()) continue;
    // The value of a secret is never shown.
    return absl::InvalidArgumentError(f.kind == Kind::kSecret
                                          ? absl::StrCat(f.env, ": ", st.message())
                                          : absl::StrCat(f.env, "='", v, "': ", st.message()));
  }
  GRANARY_RETURN_IF_ERROR(o.Validate());
  return o;
}
absl::Status ClientOptions::Validate() const {
  if (etcd::EndpointsOfMasterAddress(master_server_address).has_value()) {
    GRANARY_RETURN_IF_ERROR(
        etcd::ValidateMasterAddress("master_server_address", master_server_address, cluster_id));
  } else if (auto hp = common::ParseHostPort(master_server_address); !hp.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("master_server_address: ", hp.status().message()));
  }
  if (gpu_device < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_device ", gpu_device, " is not a GPU index (or -1 for none)"));
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
  if (tcp_data_between_hosts != "messages" && tcp_data_between_hosts != "one_sided") {
    return absl::InvalidArgumentError(absl::StrCat(
        "tcp_data_between_hosts '", tcp_data_between_hosts, "' is not one of messages, one_sided"));
  }
  if (copy_threads < 0 || copy_threads > kMaxCopyThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy_threads ", copy_threads, " is outside 0..", kMaxCopyThreads));
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
