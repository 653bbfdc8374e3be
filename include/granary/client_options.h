#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace granary {

// How a client reaches and uses a Granary cluster. Every field has a default; FromJsonFile and
// FromEnvironment only fill it, and Validate() rejects a present-but-invalid value by name.
struct ClientOptions {
  // host:port of the master (`master_server_address` in the JSON file, GRANARY_MASTER).
  std::string master_server_address = "127.0.0.1:50051";
  // The tenant every key of this client belongs to (`tenant_id`, GRANARY_TENANT_ID).
  std::string tenant_id = "default";
  // The tenant's client credential (`tenant_token`, GRANARY_TENANT_TOKEN), at most 256 bytes;
  // empty = none. Sent at hello; a master that holds a hash for the tenant (policy
  // `token_sha256` or --tenant_tokens_file) refuses the session unless sha256(token) matches.
  // A secret: never logged. It crosses the control connection in clear (docs/security.md).
  std::string tenant_token;
  // Reserved for multi-NIC placement: this host's name as nodes see it (`local_hostname`).
  std::string local_hostname;
  // "ucx" (the only data plane); UCX_TLS picks the transports (`protocol`).
  std::string protocol = "ucx";
  // RDMA device(s) to prefer, as UCX_NET_DEVICES would name them (`device_name`).
  std::string device_name;
  // Size of the registered staging buffer for unregistered user memory (`local_buffer_size`).
  uint64_t local_buffer_size = 64ull << 20;
  // Replicas per object written by Put (`replica_num`), on distinct nodes.
  int replica_num = 1;
  // Control-plane timeout per request (`rpc_timeout_ms`).
  int64_t rpc_timeout_ms = 10'000;
  // Timeout of one batch of one-sided transfers (`transfer_timeout_ms`).
  int64_t transfer_timeout_ms = 30'000;
  // Reads retried when a replica changed under them (`get_retries`).
  int get_retries = 3;
  // Keys of the JSON file this version does not know; reported, never silently dropped.
  std::vector<std::string> unknown_keys;

  // Reads a JSON file (Mooncake-style client files load unchanged). Sizes accept units ("4GB").
  static absl::StatusOr<ClientOptions> FromJsonFile(const std::string& path);
  // The file named by GRANARY_CONFIG_PATH if set, else GRANARY_* environment variables.
  static absl::StatusOr<ClientOptions> FromEnvironment();
  absl::Status Validate() const;
};

}  // namespace granary
