#pragma once

// Sessions and segments: Hello, Heartbeat, MountSegment, UnmountSegment, the StatusReply every
// refusal is, and Attach (the first frame on a connection's endpoint).

#include <cstdint>
#include <string>
#include <vector>

#include "proto/wire_types.h"

namespace granary::proto {

struct HelloRequest {
  Role role = Role::kClient;
  std::string client_id;
  std::string tenant_id;
  uint16_t protocol_version = kProtocolVersion;
  // The tenant's client credential (ClientOptions::tenant_token), at most kMaxTokenBytes; empty
  // when none is configured. The master compares its SHA-256 with the tenant's expected hash.
  // A secret: never log it.
  std::string token;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = HelloRequest;
    v(&S::role, "role");
    v(&S::client_id, "client_id", kMaxNameBytes);
    v(&S::tenant_id, "tenant_id", kMaxTenantIdBytes);
    v(&S::protocol_version, "protocol_version");
    v(&S::token, "token", kMaxTokenBytes);
  }
};
struct HelloReply {
  WireStatus status;
  uint64_t session_id = 0;
  uint32_t heartbeat_interval_ms = 0;
  std::string master_id;
  // With HA, the epoch this master leads in (the create_revision of master_view); 0 without
  // HA. Peers keep the highest epoch seen.
  uint64_t epoch = 0;
  // How long after sending a PutStart the client may write what it granted (the write window,
  // master::MasterOptions::write_window_ms);
  // the client cancels its writes past then. 0: no window (a test master).
  uint32_t write_window_ms = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = HelloReply;
    v(&S::status, "status");
    v(&S::session_id, "session_id");
    v(&S::heartbeat_interval_ms, "heartbeat_interval_ms");
    v(&S::master_id, "master_id", kMaxNameBytes);
    v(&S::epoch, "epoch");
    v(&S::write_window_ms, "write_window_ms");
  }
};

// A node's memory cgroup (granary_node --cgroup; node/cgroup.h CgroupFigures), in its
// heartbeats so that the master's /api/v1/nodes shows it. Bytes and counts as the kernel gives
// them; 0 where the kernel lacks the file (v1 has no "oom" count, older kernels no peak).
struct NodeCgroupReport {
  std::string path;     // the cgroup's directory
  std::string version;  // "v1" or "v2"
  uint64_t limit = 0;
  uint64_t effective_limit = 0;  // the smallest limit up the tree
  uint64_t usage = 0;
  uint64_t peak = 0;
  uint64_t limit_hits = 0;  // v1 memory.failcnt, v2 memory.events "max"
  uint64_t oom = 0;         // v2 memory.events "oom"
  uint64_t oom_kill = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = NodeCgroupReport;
    v(&S::path, "cgroup.path", kMaxNameBytes);
    v(&S::version, "cgroup.version", kMaxNameBytes);
    v(&S::limit, "cgroup.limit");
    v(&S::effective_limit, "cgroup.effective_limit");
    v(&S::usage, "cgroup.usage");
    v(&S::peak, "cgroup.peak");
    v(&S::limit_hits, "cgroup.limit_hits");
    v(&S::oom, "cgroup.oom");
    v(&S::oom_kill, "cgroup.oom_kill");
  }
};

struct HeartbeatRequest {
  // A node under --cgroup sets it; clients and other nodes leave it out (one byte: absent).
  bool has_cgroup = false;
  NodeCgroupReport cgroup;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = HeartbeatRequest;
    v.Optional(&S::has_cgroup, &S::cgroup, "has_cgroup");
  }
};
struct HeartbeatReply {
  WireStatus status;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = HeartbeatReply;
    v(&S::status, "status");
  }
};

struct MountSegmentRequest {
  std::string name;          // node-unique segment name
  std::string node_id;       // stable id of the node process
  std::string node_address;  // host:port of the node's UCX listener
  uint64_t base = 0;         // remote virtual address of byte 0
  uint64_t size = 0;
  Tier tier = Tier::kHost;
  std::string rkey;            // packed UCX remote key
  std::string pool;            // tenant of a dedicated pool; empty = shared
  std::string worker_address;  // the node's UCX worker address (data endpoints connect to it)
  std::string host_id;         // identifies the machine (boot id): same-host peers use shm
  // The segment was mounted at a master before (by this node process): it may hold committed
  // objects, which an InventoryReport follows with, and may still be written by that master's
  // clients. The master allocates nothing in it until the report is done.
  bool resumed = false;
  // Tier kGpu only (empty otherwise): the segment's device memory exported by the node's device
  // backend (DeviceRuntime::ExportIpc of byte 0, at most kMaxGpuIpcBytes), which same-host
  // clients open once per segment, and the 16-byte UUID of its device. A GPU segment has no
  // rkey on a UCX without CUDA support: device memory is never handed to such a UCX.
  std::string gpu_ipc;
  std::string gpu_uuid;
  // Where the segment sits on its host (transport/topology.h): the NIC port that serves it (as
  // UCX_NET_DEVICES names it; empty: UCX's choice), the NUMA node its memory is bound to and
  // the GPU of a GPU segment or of the NIC's pairing (-1: none or unknown).
  std::string nic;
  int32_t numa_node = -1;
  int32_t gpu = -1;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = MountSegmentRequest;
    v(&S::name, "name", kMaxNameBytes);
    v(&S::node_id, "node_id", kMaxNameBytes);
    v(&S::node_address, "node_address", kMaxNameBytes);
    v(&S::base, "base");
    v(&S::size, "size");
    v(&S::tier, "tier");
    v(&S::rkey, "rkey", kMaxRkeyBytes);
    v(&S::pool, "pool", kMaxTenantIdBytes);
    v(&S::worker_address, "worker_address", kMaxRkeyBytes);
    v(&S::host_id, "host_id", kMaxNameBytes);
    v(&S::resumed, "resumed");
    v(&S::gpu_ipc, "gpu_ipc", kMaxGpuIpcBytes);
    v(&S::gpu_uuid, "gpu_uuid", kGpuUuidBytes);
    v(&S::nic, "nic", kMaxNameBytes);
    v(&S::numa_node, "numa_node");
    v(&S::gpu, "gpu");
  }
};
struct MountSegmentReply {
  WireStatus status;
  uint64_t segment_id = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = MountSegmentReply;
    v(&S::status, "status");
    v(&S::segment_id, "segment_id");
  }
};

struct UnmountSegmentRequest {
  uint64_t segment_id = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = UnmountSegmentRequest;
    v(&S::segment_id, "segment_id");
  }
};
struct StatusReply {
  WireStatus status;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = StatusReply;
    v(&S::status, "status");
  }
};

// kAttach, the first frame on a connection's endpoint: joins the connection whose handshake
// offered `nonce` (proto/handshake.h). The server answers on its own endpoint to
// `worker_address`, the client worker's UCX address.
struct AttachRequest {
  uint64_t nonce = 0;
  std::string worker_address;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = AttachRequest;
    v(&S::nonce, "nonce");
    v(&S::worker_address, "worker_address", kMaxRkeyBytes);
  }
};

}  // namespace granary::proto
