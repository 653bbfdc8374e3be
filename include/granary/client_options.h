#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "granary/log_sink.h"

namespace granary {

// How a client reaches and uses a Granary cluster. Every field has a default; FromJsonFile and
// FromEnvironment only fill it (from one table of JSON keys and GRANARY_* variables), and
// Validate() rejects a present-but-invalid value by name. Keys that older versions read and
// this one does not (`local_buffer_size`, `local_hostname`) load with a warning naming them.
struct ClientOptions {
  // host:port of the master (`master_server_address` or `master_server_addr` in the JSON
  // file, GRANARY_MASTER), or `etcd://h1:2379;h2:2379` with HA: the client then reads the
  // active master from etcd before every (re)connect, follows a failover, and refuses a master
  // whose epoch is older than one it has seen.
  std::string master_server_address = "127.0.0.1:50051";
  // With an etcd:// master: the cluster whose granary/<cluster_id>/master_view names the
  // active master (`cluster_id`, GRANARY_CLUSTER_ID; the masters' --cluster_id).
  std::string cluster_id = "granary_cluster";
  // The tenant every key of this client belongs to (`tenant_id`, GRANARY_TENANT_ID).
  std::string tenant_id = "default";
  // The tenant's client credential (`tenant_token`, GRANARY_TENANT_TOKEN), at most 256 bytes;
  // empty = none. Sent at hello; a master that holds a hash for the tenant (policy
  // `token_sha256` or --tenant_tokens_file) refuses the session unless sha256(token) matches.
  // A secret: never logged. It crosses the control connection in clear (docs/security.md).
  std::string tenant_token;
  // The data plane is always UCX (`protocol`, GRANARY_PROTOCOL): "tcp" limits it to tcp
  // (UCX_TLS=tcp); "ucx" and "rdma" leave UCX_TLS (from the environment, else UCX's choice).
  std::string protocol = "ucx";
  // Network device(s) for the data path, as UCX_NET_DEVICES names them ("mlx5_0:1", "eth0";
  // `device_name` or `rdma_devices`, GRANARY_DEVICE_NAME). Empty: UCX_NET_DEVICES from the
  // environment if set, else the NIC nearest gpu_device, else UCX's own choice. A name this
  // host lacks fails Create.
  std::string device_name;
  // The GPU this client's buffers live on (`gpu_device`, GRANARY_GPU_DEVICE; -1: none): its
  // UCX context uses the NIC paired with it (same PCIe switch, then NUMA node; README
  // "How Granary picks NICs").
  int gpu_device = -1;
  // Replicas per object written by Put (`replica_num`, GRANARY_REPLICA_NUM), on distinct
  // nodes.
  int replica_num = 1;
  // Control-plane timeout per request (`rpc_timeout_ms`, GRANARY_RPC_TIMEOUT_MS).
  int64_t rpc_timeout_ms = 10'000;
  // Timeout of one batch of one-sided transfers (`transfer_timeout_ms`,
  // GRANARY_TRANSFER_TIMEOUT_MS).
  int64_t transfer_timeout_ms = 30'000;
  // Reads retried when a replica changed under them (`get_retries`, GRANARY_GET_RETRIES).
  int get_retries = 3;
  // How values move between this client and a node on another host when UCX reaches it over
  // tcp alone (`tcp_data_between_hosts`, GRANARY_TCP_DATA_BETWEEN_HOSTS). "messages" (the
  // default): every host-memory value up to 64 MiB travels in the node's Read and Write
  // messages on the control connection, so no UCX endpoint to the node's worker address is
  // made (UCX 1.13 never tears those down at the far side, and its clean-up of them aborted
  // nodes in long soaks). "one_sided": every value moves one-sided through an endpoint to the
  // node's worker address, as before this option (UCX 1.13 reports no rma lane on such an
  // endpoint across hosts when it is made, so neither Read/Write nor Push was used there).
  // RDMA and same-host transports are unaffected.
  std::string tcp_data_between_hosts = "messages";
  // Threads that copy a large batch's values to and from same-host nodes together with the
  // calling thread (`copy_threads`, GRANARY_COPY_THREADS; 0..kMaxCopyThreads). A batch that
  // moves at least 1 MiB through mapped shared memory is split in parts of 256 KiB, and the
  // caller and these threads take parts until none is left: the caller never waits for one of
  // them to wake up, only for parts they already started. One thread copies from DRAM at a
  // fraction of the memory system's bandwidth. 0: the caller copies alone. Idle, they sleep.
  int copy_threads = 1;
  static constexpr int kMaxCopyThreads = 64;
  // The lowest level of the lines this client logs (`log_level`, GRANARY_LOG_LEVEL: debug,
  // info, warning, error); lines below it are not even formatted. Unset (the default): the
  // process's threshold (GRANARY_LOG_LEVEL at first use, or what the program set). It applies
  // to this client's lines only: creating a client changes no process-wide setting.
  std::optional<LogLevel> log_level;
  // Where this client's lines go: its own threads' and, during a call, the calling thread's
  // lines from the library. Null (the default): stderr. Set in code only; see LogSink.
  std::shared_ptr<LogSink> log_sink;
  // Keys of the JSON file this version does not use (unknown or removed); reported in a
  // warning, never silently dropped.
  std::vector<std::string> unknown_keys;

  // Reads a JSON file (Mooncake-style client files load unchanged). Sizes accept units ("4GB").
  [[nodiscard]] static absl::StatusOr<ClientOptions> FromJsonFile(const std::string& path);
  // The file named by GRANARY_CONFIG_PATH if set, else GRANARY_* environment variables.
  [[nodiscard]] static absl::StatusOr<ClientOptions> FromEnvironment();
  [[nodiscard]] absl::Status Validate() const;
};

}  // namespace granary
