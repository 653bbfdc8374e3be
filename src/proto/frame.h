#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace granary::proto {

// Control-plane frame, little-endian, 32-byte header then the body:
//   u32 magic 'GRNY' | u16 version | u16 type | u32 flags | u64 request_id | u32 body_len |
//   i64 epoch
// body_len must equal the bytes that follow and be at most kMaxFrameBody. epoch (HA): in a
// request to a master, the epoch the sender's session was opened at (0: none); in a master's
// reply, the epoch of its last election, also once fenced (0: never elected, or no HA).
// Frames between
// clients and nodes carry 0.
inline constexpr uint32_t kFrameMagic = 0x594E5247;  // "GRNY"
// 2: HelloRequest.token; kShmOffer and kShmAttach. 3: WireStatus.reason (every reply).
// 4: Remove carries RemoveRequest (keys + force); reasons HAS_LEASE and DEVICE_POINTER.
// 5: kInventorySync and kInventoryReport; MountSegmentRequest.resumed.
// 6: GetResult.lease_token, echoed in KeyGen.lease_token by GetEnd; HeartbeatRequest carries
//    a node's cgroup figures (has_cgroup, NodeCgroupReport); MountSegmentRequest and
//    SegmentInfo .gpu_ipc and .gpu_uuid (GPU segments); PutStartRequest flags kPutFlagTierGpu;
//    HelloReply.epoch and .write_window_ms; reason NOT_LEADER (HA: a standby or fenced master
//    refuses requests); MountSegmentRequest and SegmentInfo .nic, .numa_node and .gpu (where
//    the segment sits: transport/topology.h).
// 7: ShmAttachRequest.worker_address (the server answers on its own endpoint to the client's
//    worker); InventorySyncRequest.acked and InventorySyncReply.token (records are kept until
//    a poll acknowledges them).
// 8: FetchRequest.timeout_ms and PushRequest.timeout_ms (the node's deadline for the transfer).
// 9: the frame header's epoch (32-byte header): every master reply and command carries the
//    master's epoch, every request the epoch its session expects.
// 10: InventoryReportRequest.total (the report's record count: the master sizes its table).
// 11: PutStartRequest flags bits 2-3 are a tier preference (kPutFlagTierMask): 0 now means the
//     tenant's default_tier, and host, gpu and any are named.
// 12: kRead and kWrite (small values to and from a node over tcp, inline in the messages).
// 13: connections open with Granary's own handshake (proto/handshake.h) instead of UCX's
//     sockaddr listener; kShmOffer is retired and kShmAttach is kAttach, the first frame on
//     every connection's endpoint.
inline constexpr uint16_t kProtocolVersion = 13;
inline constexpr size_t kFrameHeaderSize = 32;
inline constexpr size_t kFrameEpochOffset = 24;
inline constexpr uint32_t kMaxFrameBody = 64u << 20;

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;
  uint32_t flags = 0;
  uint64_t request_id = 0;
  int64_t epoch = 0;
};

// A decoded frame; body points into the buffer that was decoded.
struct FrameView {
  FrameHeader header;
  absl::string_view body;
};

// Writes the header for a body of body_len bytes into out (which must be empty); the caller
// appends the body. FinishFrame patches body_len once the body is written.
void BeginFrame(const FrameHeader& h, std::string* out);
void FinishFrame(std::string* out);
// Sets the epoch of an encoded frame (no-op on a buffer shorter than a header).
void SetFrameEpoch(std::string* frame, int64_t epoch);
// The epoch of an encoded frame's header (0 for a buffer shorter than a header); no other
// check.
int64_t FrameEpoch(absl::string_view frame);

// Parses a whole frame. Truncated, oversized, wrong-magic or wrong-version input is an
// INVALID_ARGUMENT (FAILED_PRECONDITION for a version mismatch) naming what was wrong.
[[nodiscard]] absl::StatusOr<FrameView> DecodeFrame(absl::string_view data);

}  // namespace granary::proto
