#pragma once

// Client and node data messages (Fetch, Push, Read, Write) and the prefix lookup.

#include <cstdint>
#include <string>
#include <vector>

#include "proto/object_messages.h"

namespace granary::proto {

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
// The largest value on a disk tier: one Write carries it with its header, and its tenant and key
// too (at most 128 and 4,096 bytes).
inline constexpr uint64_t kMaxDiskValue = kMaxMessageValue - 8192;
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
// Protocol 15: a Write to a disk tier names whose objects it writes, since a disk record keeps
// its tenant and key (node/disk/disk_record.h): `tenant` (the writer's) and `keys`, one per
// entry, or none when no entry is on a disk tier.
template <class S>
absl::Status CheckWriteKeys(const S& m) {
  if (m.keys.empty() || m.keys.size() == m.entries.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("write of ", m.entries.size(), " entries names ",
                                                 m.keys.size(), " keys (one per entry, or none)"));
}
struct WriteRequest {
  std::vector<InlineEntry> entries;
  std::string data;
  std::string tenant;
  std::vector<std::string> keys;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = WriteRequest;
    v(&S::entries, "entries", kMaxBatch);
    v(&S::data, "data", kMaxFrameBody);
    if (!v.Since(15)) return;
    v(&S::tenant, "tenant", kMaxTenantIdBytes);
    v(&S::keys, "keys", kMaxBatch, kMaxKeyBytes);
    v.Check(CheckWriteKeys<S>);
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
  std::string tenant;
  std::vector<std::string> keys;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = WriteRequestView;
    v(&S::entries, "entries", kMaxBatch);
    v(&S::data, "data", kMaxFrameBody);
    if (!v.Since(15)) return;
    v(&S::tenant, "tenant", kMaxTenantIdBytes);
    v(&S::keys, "keys", kMaxBatch, kMaxKeyBytes);
    v.Check(CheckWriteKeys<S>);
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
                                    absl::FunctionRef<void(char*)> fill,
                                    const std::string& tenant = {},
                                    const std::vector<std::string>& keys = {});

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

}  // namespace granary::proto
