#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "common/tier_preference.h"
#include "proto/alloc_header.h"
#include "proto/codec.h"
#include "proto/fields.h"
#include "proto/frame.h"
#include "proto/message_table.h"

namespace granary::proto {

// Documented limits (docs/limits in the README). A frame that exceeds one is rejected whole.
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxTenantIdBytes = 128;
inline constexpr size_t kMaxTokenBytes = 256;  // HelloRequest.token (a tenant credential)
inline constexpr uint32_t kMaxBatch = 16384;
inline constexpr uint32_t kMaxReplicaNum = 8;
inline constexpr size_t kMaxRkeyBytes = 64 << 10;
inline constexpr size_t kMaxNameBytes = 512;
inline constexpr size_t kMaxMessageBytes = 4096;
// A GPU segment's IPC handle (an opaque blob of the node's device backend) and device UUID.
inline constexpr size_t kMaxGpuIpcBytes = 1024;
inline constexpr size_t kGpuUuidBytes = 16;
inline constexpr uint64_t kMaxValueBytes = 1ull << 40;  // 1 TB
inline constexpr uint32_t kMaxListLimit = 100000;
// Records in one InventorySync reply or InventoryReport request.
inline constexpr uint32_t kMaxInventoryBatch = 16384;
// InventorySyncRequest.wait_ms: the longest a poll may be parked at the master.
inline constexpr uint32_t kMaxInventoryWaitMs = 60000;

// Message types (message_table.h). A reply's type is the request's type | kReplyBit.
enum class MsgType : uint16_t {
#define GRANARY_MSG_ENUM(Name, number, ...) k##Name = number,
  GRANARY_MESSAGES(GRANARY_MSG_ENUM) GRANARY_RESERVED_MESSAGES(GRANARY_MSG_ENUM)
#undef GRANARY_MSG_ENUM
};
// Who answers a message (message_table.h's last column).
enum class Server : uint8_t { kMaster, kNode, kRpc };
inline constexpr uint16_t kReplyBit = 0x8000;
const char* MsgTypeName(uint16_t type);

// A status as carried on the wire: absl code, message and the typed reason (an ErrorReason
// payload on the absl::Status; see common/error_reason.h).
struct WireStatus {
  uint8_t code = 0;
  std::string message;
  ErrorReason reason = ErrorReason::kNone;
  static WireStatus From(const absl::Status& s);
  [[nodiscard]] absl::Status ToStatus() const;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = WireStatus;
    v(&S::code, "status.code");
    v(&S::message, "status.message", kMaxMessageBytes);
    v(&S::reason, "status.reason");
    v.Check([](const S& s) {
      return s.code <= static_cast<uint8_t>(absl::StatusCode::kUnauthenticated)
                 ? absl::OkStatus()
                 : absl::InvalidArgumentError(absl::StrCat("unknown status code ", s.code));
    });
  }
};

enum class Role : uint8_t { kClient = 1, kNode = 2 };
enum class Tier : uint8_t { kHost = 0, kGpu = 1 };

// An object version's state, in the master's table and in ObjectInfo. Only kComplete objects
// are served; a kProcessing one is being written (between PutStart and PutEnd).
enum class ObjectState : uint8_t { kProcessing = 0, kComplete = 1 };

// The byte values of each enum on the wire (fields.h).
template <>
struct WireEnum<ErrorReason> {
  static constexpr uint8_t kMin = 0, kMax = static_cast<uint8_t>(kLastErrorReason);
  static constexpr const char* kNoun = "error reason";
};
template <>
struct WireEnum<Role> {
  static constexpr uint8_t kMin = 1, kMax = 2;
  static constexpr const char* kNoun = "role";
};
template <>
struct WireEnum<Tier> {
  static constexpr uint8_t kMin = 0, kMax = 1;
  static constexpr const char* kNoun = "tier";
};
template <>
struct WireEnum<ObjectState> {
  static constexpr uint8_t kMin = 0, kMax = 1;
  static constexpr const char* kNoun = "object state";
};

// PutStartRequest.flags bits: how the object is pinned against eviction (granary::PutOptions).
inline constexpr uint32_t kPutFlagSoftPin = 1u << 0;  // evicted only when nothing else is left
inline constexpr uint32_t kPutFlagHardPin = 1u << 1;  // never evicted (still removable)
// Bits 2-3: the tier the replicas are placed on (granary::PutOptions::tier): 0 the tenant's
// default_tier from the policy (host when it names none), else 1 + TierPreference (1 GPU
// segments only, 2 host segments only, 3 any: GPU while it has room, else host). Protocol 10
// knew only 0 (host) and kPutFlagTierGpu.
inline constexpr uint32_t kPutFlagTierShift = 2;
inline constexpr uint32_t kPutFlagTierMask = 3u << kPutFlagTierShift;
inline constexpr uint32_t kPutFlagTierGpu = 1u << kPutFlagTierShift;
// The flag bits of a tier preference (nullopt: the tenant's default).
inline uint32_t PutTierFlags(std::optional<TierPreference> t) {
  if (!t.has_value()) return 0;
  const uint32_t v = *t == TierPreference::kGpu ? 1u : *t == TierPreference::kHost ? 2u : 3u;
  return v << kPutFlagTierShift;
}
// The tier preference of PutStartRequest.flags (nullopt: the tenant's default).
inline std::optional<TierPreference> PutTierOf(uint32_t flags) {
  switch ((flags & kPutFlagTierMask) >> kPutFlagTierShift) {
    case 1:
      return TierPreference::kGpu;
    case 2:
      return TierPreference::kHost;
    case 3:
      return TierPreference::kAny;
    default:
      return std::nullopt;
  }
}

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
  // How long after sending a PutStart the client may write what it granted (HA.md section 4);
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
  // backend (DeviceBackend::ExportIpc of byte 0, at most kMaxGpuIpcBytes), which same-host
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

// Where one replica's bytes live. `address` is the remote address of the allocation header;
// the value follows it. `length` is header + value, as allocated.
struct ReplicaDesc {
  uint64_t segment_id = 0;
  uint64_t address = 0;
  uint64_t length = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = ReplicaDesc;
    v(&S::segment_id, "replica.segment_id");
    v(&S::address, "replica.address");
    v(&S::length, "replica.length");
  }
};

struct PutStartEntry {
  std::string key;
  uint64_t size = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = PutStartEntry;
    v(&S::key, "key", kMaxKeyBytes);
    v(&S::size, "size");
  }
};
struct PutStartRequest {
  std::vector<PutStartEntry> entries;
  uint8_t replica_num = 1;
  uint32_t flags = 0;  // kPutFlag* bits
  template <class V>
  static constexpr void Fields(V& v) {
    using S = PutStartRequest;
    v(&S::entries, "entries", kMaxBatch);
    v(&S::replica_num, "replica_num");
    v(&S::flags, "flags");
  }
};
struct PutStartResult {
  WireStatus status;
  uint64_t generation = 0;
  std::vector<ReplicaDesc> replicas;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = PutStartResult;
    v(&S::status, "status");
    v(&S::generation, "generation");
    v(&S::replicas, "replicas", kMaxReplicaNum);
  }
};
struct PutStartReply {
  WireStatus status;  // whole-request failure (bad session...); per-key results otherwise
  std::vector<PutStartResult> results;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = PutStartReply;
    v(&S::status, "status");
    v(&S::results, "results", kMaxBatch);
  }
};

// PutEnd, PutRevoke and GetEnd name an object version by key and generation. GetEnd also
// echoes the lease token of the Get that took the lease (GetResult::lease_token); PutEnd and
// PutRevoke leave it 0.
struct KeyGen {
  std::string key;
  uint64_t generation = 0;
  uint64_t lease_token = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = KeyGen;
    v(&S::key, "key", kMaxKeyBytes);
    v(&S::generation, "generation");
    v(&S::lease_token, "lease_token");
  }
};
struct KeyGenRequest {
  std::vector<KeyGen> entries;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = KeyGenRequest;
    v(&S::entries, "entries", kMaxBatch);
  }
};
struct BatchStatusReply {
  WireStatus status;
  std::vector<WireStatus> results;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = BatchStatusReply;
    v(&S::status, "status");
    v(&S::results, "results", kMaxBatch);
  }
};

struct KeysRequest {
  std::vector<std::string> keys;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = KeysRequest;
    v(&S::keys, "keys", kMaxBatch, kMaxKeyBytes);
  }
};
// Get: the keys, and the read lease the client asks for, in ms (protocol 14; 0, and every
// older client: the master's --default_kv_lease_ttl). The master grants at most
// kMaxReadLeaseMs and answers the lease it granted in GetResult::lease_ms.
inline constexpr uint32_t kMaxReadLeaseMs = 600'000;
struct GetRequest {
  std::vector<std::string> keys;
  uint32_t lease_ms = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = GetRequest;
    v(&S::keys, "keys", kMaxBatch, kMaxKeyBytes);
    if (!v.Since(14)) return;
    v(&S::lease_ms, "lease_ms");
  }
};
// Remove. Without force, a key whose read lease is held (a Get in flight) is refused with
// FAILED_PRECONDITION / ErrorReason::kHasLease; with force it is removed anyway (the reader's
// header check then fails and it sees NOT_FOUND or retries, never wrong bytes). A put in
// progress is refused either way.
struct RemoveRequest {
  std::vector<std::string> keys;
  bool force = false;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = RemoveRequest;
    v(&S::keys, "keys", kMaxBatch, kMaxKeyBytes);
    v(&S::force, "force");
  }
};

struct GetResult {
  WireStatus status;
  uint64_t size = 0;
  uint64_t generation = 0;
  uint32_t lease_ms = 0;
  // Names this read lease to the master: GetEnd echoes it, so a reader that ends after its
  // lease ran out never ends a later reader's lease. Opaque to clients.
  uint64_t lease_token = 0;
  std::vector<ReplicaDesc> replicas;  // complete replicas only
  template <class V>
  static constexpr void Fields(V& v) {
    using S = GetResult;
    v(&S::status, "status");
    v(&S::size, "size");
    v(&S::generation, "generation");
    v(&S::lease_ms, "lease_ms");
    v(&S::lease_token, "lease_token");
    v(&S::replicas, "replicas", kMaxReplicaNum);
  }
};
struct GetReply {
  WireStatus status;
  std::vector<GetResult> results;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = GetReply;
    v(&S::status, "status");
    v(&S::results, "results", kMaxBatch);
  }
};

struct ListRequest {
  std::string prefix;
  std::string start_after;
  uint32_t limit = 1000;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = ListRequest;
    v(&S::prefix, "prefix", kMaxKeyBytes);
    v(&S::start_after, "start_after", kMaxKeyBytes);
    v(&S::limit, "limit");
    v.Check([](const S& m) {
      return m.limit != 0 && m.limit <= kMaxListLimit
                 ? absl::OkStatus()
                 : absl::InvalidArgumentError(
                       absl::StrCat("list limit ", m.limit, " is outside 1..", kMaxListLimit));
    });
  }
};
struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  uint64_t generation = 0;
  ObjectState state = ObjectState::kProcessing;
  uint32_t replica_count = 0;
  uint64_t age_ms = 0;
  // Where each replica lives: segment id, offset inside the segment (not an address), bytes.
  std::vector<ReplicaDesc> replicas;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = ObjectInfo;
    v(&S::key, "key", kMaxKeyBytes);
    v(&S::size, "size");
    v(&S::generation, "generation");
    v(&S::state, "state");
    v(&S::replica_count, "replica_count");
    v(&S::age_ms, "age_ms");
    v(&S::replicas, "replicas", kMaxReplicaNum);
  }
};
struct ListReply {
  WireStatus status;
  std::vector<ObjectInfo> objects;
  bool more = false;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = ListReply;
    v(&S::status, "status");
    v(&S::objects, "objects", kMaxListLimit);
    v(&S::more, "more");
  }
};

struct SegmentsRequest {
  template <class V>
  static constexpr void Fields(V& v) {}
};
struct SegmentInfo {
  uint64_t segment_id = 0;
  std::string name;
  std::string node_id;
  std::string node_address;
  uint64_t base = 0;
  uint64_t size = 0;
  uint64_t used = 0;
  Tier tier = Tier::kHost;
  std::string pool;
  std::string rkey;
  std::string worker_address;
  std::string host_id;
  std::string gpu_ipc;   // MountSegmentRequest::gpu_ipc
  std::string gpu_uuid;  // MountSegmentRequest::gpu_uuid
  std::string nic;       // MountSegmentRequest::nic
  int32_t numa_node = -1;
  int32_t gpu = -1;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = SegmentInfo;
    v(&S::segment_id, "segment_id");
    v(&S::name, "name", kMaxNameBytes);
    v(&S::node_id, "node_id", kMaxNameBytes);
    v(&S::node_address, "node_address", kMaxNameBytes);
    v(&S::base, "base");
    v(&S::size, "size");
    v(&S::used, "used");
    v(&S::tier, "tier");
    v(&S::pool, "pool", kMaxTenantIdBytes);
    v(&S::rkey, "rkey", kMaxRkeyBytes);
    v(&S::worker_address, "worker_address", kMaxRkeyBytes);
    v(&S::host_id, "host_id", kMaxNameBytes);
    v(&S::gpu_ipc, "gpu_ipc", kMaxGpuIpcBytes);
    v(&S::gpu_uuid, "gpu_uuid", kGpuUuidBytes);
    v(&S::nic, "nic", kMaxNameBytes);
    v(&S::numa_node, "numa_node");
    v(&S::gpu, "gpu");
  }
};
struct SegmentsReply {
  WireStatus status;
  std::vector<SegmentInfo> segments;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = SegmentsReply;
    v(&S::status, "status");
    v(&S::segments, "segments", kMaxBatch);
  }
};

// CopyStart/MoveStart: add a replica of an object on `target` (a node id or its host:port);
// a move then drops the source replica at MoveEnd.
struct CopyStartEntry {
  std::string key;
  std::string target;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = CopyStartEntry;
    v(&S::key, "key", kMaxKeyBytes);
    v(&S::target, "target", kMaxNameBytes);
  }
};
struct CopyStartRequest {
  std::vector<CopyStartEntry> entries;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = CopyStartRequest;
    v(&S::entries, "entries", kMaxBatch);
  }
};
struct CopyStartResult {
  WireStatus status;
  uint64_t generation = 0;
  ReplicaDesc source;
  ReplicaDesc dest;
  std::string dest_node_address;  // where to send the Fetch
  template <class V>
  static constexpr void Fields(V& v) {
    using S = CopyStartResult;
    v(&S::status, "status");
    v(&S::generation, "generation");
    v(&S::source, "source");
    v(&S::dest, "dest");
    v(&S::dest_node_address, "dest_node_address", kMaxNameBytes);
  }
};
struct CopyStartReply {
  WireStatus status;
  std::vector<CopyStartResult> results;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = CopyStartReply;
    v(&S::status, "status");
    v(&S::results, "results", kMaxBatch);
  }
};
// CopyEnd/CopyRevoke/MoveEnd/MoveRevoke name the copy by key, generation and destination.
struct CopyEndEntry {
  std::string key;
  uint64_t generation = 0;
  uint64_t dest_segment_id = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = CopyEndEntry;
    v(&S::key, "key", kMaxKeyBytes);
    v(&S::generation, "generation");
    v(&S::dest_segment_id, "dest_segment_id");
  }
};
struct CopyEndRequest {
  std::vector<CopyEndEntry> entries;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = CopyEndRequest;
    v(&S::entries, "entries", kMaxBatch);
  }
};
// Asks a node to read `length` bytes one-sided from a source segment into its own memory.
struct FetchRequest {
  SegmentInfo source;  // worker_address, rkey, host_id, node_address, segment_id
  uint64_t source_address = 0;
  uint64_t dest_address = 0;
  uint64_t length = 0;
  // The node's deadline (NodeTransferTimeoutMs; 1..kMaxNodeTransferTimeoutMs): past it the node
  // closes its endpoint to the source, holds that node off and answers DEADLINE_EXCEEDED.
  uint32_t timeout_ms = 10'000;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = FetchRequest;
    v(&S::source, "source");
    v(&S::source_address, "source_address");
    v(&S::dest_address, "dest_address");
    v(&S::length, "length");
    v(&S::timeout_ms, "timeout_ms");
  }
};

// The longest deadline a Fetch or Push may ask of a node (one hour).
inline constexpr uint32_t kMaxNodeTransferTimeoutMs = 3'600'000;
// The deadline a client gives a node for a Fetch or Push, out of its own transfer timeout (the
// time it waits for the reply): three quarters of it, at least 1 ms. The node gives up first
// (closes its endpoint, so none of the transfer's bytes move later) and answers while the
// client still waits, so the client never reuses a buffer, or revokes an allocation, that a
// late write of the node's could still reach.
uint32_t NodeTransferTimeoutMs(int64_t client_timeout_ms);

// Push: a read turned around for peers reached over tcp alone. UCX 1.13 emulates a get over
// tcp with bounce-buffered active messages (four copies per byte); a put is zero-copy on the
// sending side and lands straight in place on the receiving one (two). So the node writes each
// value into the client's registered buffer `dest` (segment_id: the registration's id;
// node_address: the client's id; base and size: the buffer), flushes, and answers with the
// 64-byte allocation headers at `headers`, read after the values were written.
struct PushEntry {
  uint64_t source_address = 0;  // in the node's segment
  uint64_t dest_address = 0;    // in dest
  uint64_t length = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = PushEntry;
    v(&S::source_address, "source_address");
    v(&S::dest_address, "dest_address");
    v(&S::length, "length");
  }
};
// How a client names itself in PushRequest::dest.node_address: this prefix and a random id. A
// node forgets the endpoints it made for such a name when the client's connection goes; any
// other name (another node's address: a GPU-tier Copy or Move) it keeps.
inline constexpr char kClientPushPrefix[] = "client/";
struct PushRequest {
  SegmentInfo dest;
  std::vector<PushEntry> entries;
  std::vector<uint64_t> headers;
  // The node's deadline, as in FetchRequest: past it the node closes its endpoint to the
  // client, holds the client off (RmaEngine back-off) and answers DEADLINE_EXCEEDED.
  uint32_t timeout_ms = 10'000;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = PushRequest;
    v(&S::dest, "dest");
    v(&S::entries, "entries", kMaxBatch);
    v(&S::headers, "headers", kMaxBatch);
    v(&S::timeout_ms, "timeout_ms");
  }
};
struct PushReply {
  WireStatus status;
  std::string headers;  // kAllocHeaderSize bytes per requested header, in order
  template <class V>
  static constexpr void Fields(V& v) {
    using S = PushReply;
    v(&S::status, "status");
    v(&S::headers, "headers", static_cast<size_t>(kMaxBatch) * kAllocHeaderSize);
  }
};

// Read and Write (protocol 12): small values to and from a node reached over tcp alone, in
// one message each way instead of an emulated one-sided operation per value (UCX 1.13 has no
// one-sided transfer over tcp: each is an active-message exchange, and a batch of 32 values of
// 4 KiB cost about 450 us where its bytes take about 40). An entry names an allocation in the
// node's host segments: `address` is its 64-byte header, the value's `length` bytes follow it.
struct InlineEntry {
  uint64_t address = 0;
  uint64_t length = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = InlineEntry;
    v(&S::address, "address");
    v(&S::length, "length");
  }
};
// The largest value, and the most value bytes in one message, that a client sends or asks for
// inline; larger values keep the one-sided path (Push for reads), where the node moves them
// without copying them into a message. Measured over tcp on loopback (batch 32, one thread):
// inline wins up to 16 KiB (get 109k against 62k keys/s, put 69k against 44k), draws at
// 32 KiB and loses at 64 KiB (get 1.7 against 2.4 GB/s); messages of 256 KiB keep several in
// flight and did as well as 1 MiB ones at 4 and 16 KiB, better at 64 KiB.
inline constexpr uint64_t kMaxInlineValue = 16 << 10;
inline constexpr uint64_t kMaxInlineMessage = 256 << 10;
// Between hosts reached over tcp alone every host-memory value up to this size travels in Read
// and Write messages, whatever its size (client option `tcp_data_between_hosts`): no UCX
// endpoint to another host's worker address is then made, and UCX 1.13 never tears one of
// those down at the far side (README "soak"). A value and its header fill one message at most,
// with the node's margin for the frame header and status (NodeService::CheckInline).
inline constexpr uint64_t kMaxMessageValue = kMaxFrameBody - 4096 - 64;
struct ReadRequest {
  std::vector<InlineEntry> entries;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = ReadRequest;
    v(&S::entries, "entries", kMaxBatch);
  }
};
// data: every value in entry order, then every header (64 bytes each), the headers read after
// the values, so that a header that still matches vouches for the value bytes before it (as a
// Push does).
struct ReadReply {
  WireStatus status;
  std::string data;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = ReadReply;
    v(&S::status, "status");
    v(&S::data, "data", kMaxFrameBody);
  }
};
// data: per entry, the 64-byte header, then the value. The node checks every range against
// its host segments, copies each value and then its header, and answers with a StatusReply.
struct WriteRequest {
  std::vector<InlineEntry> entries;
  std::string data;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = WriteRequest;
    v(&S::entries, "entries", kMaxBatch);
    v(&S::data, "data", kMaxFrameBody);
  }
};
// The same two messages decoded without copying their data (the hot paths): data views the
// body it was decoded from, and is valid while that is.
struct ReadReplyView {
  WireStatus status;
  absl::string_view data;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = ReadReplyView;
    v(&S::status, "status");
    v(&S::data, "data", kMaxFrameBody);
  }
};
struct WriteRequestView {
  std::vector<InlineEntry> entries;
  absl::string_view data;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = WriteRequestView;
    v(&S::entries, "entries", kMaxBatch);
    v(&S::data, "data", kMaxFrameBody);
  }
};
// The bytes a ReadReply's data holds for these entries (values, then a header each), or the
// bytes a WriteRequest's data holds (a header and a value each): the same sum.
uint64_t InlineDataBytes(const std::vector<InlineEntry>& entries);
// Whole frames with their data written in place by fill (size bytes), so the values are
// copied once, from memory into the frame: a ReadReply with an OK status, and a WriteRequest.
std::string EncodeReadReplyFrame(uint16_t type, uint64_t request_id, size_t size,
                                 absl::FunctionRef<void(char*)> fill);
std::string EncodeWriteRequestFrame(const std::vector<InlineEntry>& entries, size_t size,
                                    absl::FunctionRef<void(char*)> fill);

// LookupPrefix: how many leading keys (encoded KvKeys of one prefix chain) are present and
// complete, with a location hint per present block; optionally leases them so that the
// following Get cannot miss.
struct LookupPrefixRequest {
  std::vector<std::string> keys;
  bool lease = false;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = LookupPrefixRequest;
    v(&S::keys, "keys", kMaxBatch, kMaxKeyBytes);
    v(&S::lease, "lease");
  }
};
struct BlockHint {
  uint64_t size = 0;
  uint64_t generation = 0;
  std::string node_address;  // where the first complete replica lives
  template <class V>
  static constexpr void Fields(V& v) {
    using S = BlockHint;
    v(&S::size, "size");
    v(&S::generation, "generation");
    v(&S::node_address, "node_address", kMaxNameBytes);
  }
};
struct LookupPrefixReply {
  WireStatus status;
  uint32_t present = 0;          // leading blocks present and complete
  std::vector<BlockHint> hints;  // one per present block
  uint32_t lease_ms = 0;         // when leased
  template <class V>
  static constexpr void Fields(V& v) {
    using S = LookupPrefixReply;
    v(&S::status, "status");
    v(&S::present, "present");
    v(&S::hints, "hints", kMaxBatch);
    v(&S::lease_ms, "lease_ms");
    v.Check([](const S& m) {
      return m.present == m.hints.size() ? absl::OkStatus()
                                         : absl::InvalidArgumentError(absl::StrCat(
                                               "LookupPrefix reply says ", m.present,
                                               " present but carries ", m.hints.size(), " hints"));
    });
  }
};

// Inventories (docs/architecture.md, "Node inventories and master restart"). The master tells
// each replica's node what was committed and freed in its segments; a node never learns it from
// clients. A record names one allocation: the 64-byte AllocHeader at `offset` in the segment.
enum class InventoryOp : uint8_t { kCommit = 0, kFree = 1 };
template <>
struct WireEnum<InventoryOp> {
  static constexpr uint8_t kMin = 0, kMax = 1;
  static constexpr const char* kNoun = "inventory op";
};
struct InventoryRecord {
  InventoryOp op = InventoryOp::kCommit;
  std::string tenant;  // kCommit only (empty in a kFree record)
  std::string key;     // kCommit only
  uint64_t segment_id = 0;
  uint64_t offset = 0;      // of the allocation (its header) inside the segment
  uint64_t alloc_size = 0;  // header + value, aligned: what the allocator reserved
  uint64_t value_length = 0;
  uint64_t generation = 0;
  uint32_t flags = 0;      // kPutFlag* pins
  uint64_t commit_ms = 0;  // wall clock at commit (seeds LRU order after a restart)
  template <class V>
  static constexpr void Fields(V& v) {
    using S = InventoryRecord;
    v(&S::op, "record.op");
    v(&S::tenant, "record.tenant", kMaxTenantIdBytes);
    v(&S::key, "record.key", kMaxKeyBytes);
    v(&S::segment_id, "record.segment_id");
    v(&S::offset, "record.offset");
    v(&S::alloc_size, "record.alloc_size");
    v(&S::value_length, "record.value_length");
    v(&S::generation, "record.generation");
    v(&S::flags, "record.flags");
    v(&S::commit_ms, "record.commit_ms");
  }
};
// The long poll: answered as soon as records are queued for the node's segments, or with none
// after wait_ms (at most kMaxInventoryWaitMs).
struct InventorySyncRequest {
  uint32_t wait_ms = 1000;
  // The token of the last reply this node applied (0: none, on this connection): the master
  // keeps every record until a poll acknowledges it, and sends it again otherwise.
  uint64_t acked = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = InventorySyncRequest;
    v(&S::wait_ms, "wait_ms");
    v(&S::acked, "acked");
    v.Check([](const S& m) {
      return m.wait_ms <= kMaxInventoryWaitMs
                 ? absl::OkStatus()
                 : absl::InvalidArgumentError(absl::StrCat("inventory wait_ms ", m.wait_ms,
                                                           " is over ", kMaxInventoryWaitMs));
    });
  }
};
struct InventorySyncReply {
  WireStatus status;
  std::vector<InventoryRecord> records;  // in the order the master queued them, per segment
  uint64_t token = 0;                    // acknowledges these records (InventorySyncRequest)
  template <class V>
  static constexpr void Fields(V& v) {
    using S = InventorySyncReply;
    v(&S::status, "status");
    v(&S::records, "records", kMaxInventoryBatch);
    v(&S::token, "token");
  }
};
// A re-mounted node's committed objects (kCommit records naming the segment ids of this
// session), in batches; `last` ends the report and lets the master allocate in the segments.
// `total` is the number of records the whole report holds (protocol 10), so that the master can
// size its table once instead of growing it; 0 when unknown.
struct InventoryReportRequest {
  std::vector<InventoryRecord> records;
  bool last = false;
  uint64_t total = 0;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = InventoryReportRequest;
    v(&S::records, "records", kMaxInventoryBatch);
    v(&S::last, "last");
    v(&S::total, "total");
  }
};
struct InventoryReportReply {
  WireStatus status;
  uint32_t restored = 0;  // records the master took
  uint32_t rejected = 0;  // records it refused (out of range, overlap, a newer generation...)
  template <class V>
  static constexpr void Fields(V& v) {
    using S = InventoryReportReply;
    v(&S::status, "status");
    v(&S::restored, "restored");
    v(&S::rejected, "rejected");
  }
};

// Each message's row of message_table.h: Message<MsgType::kGet>::Request is KeysRequest.
template <MsgType T>
struct Message;
#define GRANARY_MSG_TRAITS(Name, number, Req, Rep, since, server) \
  template <>                                                     \
  struct Message<MsgType::k##Name> {                              \
    using Request = Req;                                          \
    using Reply = Rep;                                            \
    static constexpr const char* kName = #Name;                   \
    static constexpr uint16_t kSince = since;                     \
    static constexpr Server kServer = Server::server;             \
  };
GRANARY_MESSAGES(GRANARY_MSG_TRAITS)
#undef GRANARY_MSG_TRAITS

// A message type as a type: the tag that proto::Serve's handlers and ForEachMessage take.
template <MsgType T>
using Tag = std::integral_constant<MsgType, T>;

// Calls fn(Tag<T>{}) for every message of the table, in its order.
template <class Fn>
constexpr void ForEachMessage(Fn&& fn) {
#define GRANARY_MSG_EACH(Name, ...) fn(Tag<MsgType::k##Name>{});
  GRANARY_MESSAGES(GRANARY_MSG_EACH)
#undef GRANARY_MSG_EACH
}

// Calls fn(Tag<T>{}) for the message whose type is `type` (the reply bit ignored); false, and
// no call, when the table has no such message.
template <class Fn>
bool VisitMessage(uint16_t type, Fn&& fn) {
  switch (static_cast<MsgType>(type & ~kReplyBit)) {
#define GRANARY_MSG_CASE(Name, ...) \
  case MsgType::k##Name:            \
    fn(Tag<MsgType::k##Name>{});    \
    return true;
    GRANARY_MESSAGES(GRANARY_MSG_CASE)
#undef GRANARY_MSG_CASE
    default:
      return false;
  }
}

// Builds a whole frame for message m, in `version` (a peer's older one: TranscodeFrame).
template <typename T>
std::string EncodeFrame(uint16_t type, uint64_t request_id, const T& m,
                        uint16_t version = kProtocolVersion) {
  std::string out;
  out.reserve(128);
  FrameHeader h;
  h.version = version;
  h.type = type;
  h.request_id = request_id;
  BeginFrame(h, &out);
  Writer w(&out, version);
  Encode(m, w);
  FinishFrame(&out);
  return out;
}

// Decodes a frame body of `version` into T, requiring that every byte is consumed.
template <typename T>
[[nodiscard]] absl::StatusOr<T> DecodeBody(absl::string_view body,
                                           uint16_t version = kProtocolVersion) {
  Reader r(body, version);
  T m;
  GRANARY_RETURN_IF_ERROR(Decode(r, &m));
  GRANARY_RETURN_IF_ERROR(r.Finish());
  return m;
}

}  // namespace granary::proto
