#pragma once

// Objects on the master: puts, gets, existence, removal, listing, segments, copies and moves.

#include <cstdint>
#include <string>
#include <vector>

#include "proto/wire_types.h"

namespace granary::proto {

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

}  // namespace granary::proto
