#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/registrations.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "transport/rma.h"

namespace granary::client {

// What the planners ask about the world. The client answers from its master session, its
// transport and its registrations; tests answer with fakes. Called on the planning thread.
class PlanInputs {
 public:
  virtual ~PlanInputs() = default;
  // The descriptor of a mounted segment, or why there is none.
  [[nodiscard]] virtual absl::StatusOr<std::shared_ptr<const transport::RemoteSegment>> Segment(
      uint64_t id) = 0;
  // Whether the transport's endpoint to this node moves data over tcp alone.
  virtual bool TcpOnly(const std::string& node_address) = 0;
  // Whether every host-memory value to or from this segment's node travels in Read and Write
  // messages, whatever its size and on retries too: the node is on another host, reached over
  // tcp alone (client option `tcp_data_between_hosts`, proto::kMaxMessageValue).
  virtual bool MessagesOnly(const transport::RemoteSegment& segment) = 0;
  // The registered buffer holding [p, p + n), pinned for the batch; or an empty range.
  virtual RegisteredRange Registered(const void* p, size_t n) = 0;
  // A registered range as a node sees it for a Push (proto::PushRequest::dest).
  virtual proto::SegmentInfo PushTarget(const RegisteredRange& range) = 0;
};

// ----- Put -----

// Small values for one node reached over tcp alone, in one message (proto::WriteRequest or
// proto::ReadRequest, at most proto::kMaxInlineMessage value bytes; a node gets several when
// the batch is larger). headers[j] is the 64-byte header of entries[j] (written before, or
// read into), values[j] its value's bytes in this process; keys[j] its batch index.
struct InlineGroup {
  std::string node;
  bool other_host = false;  // the node's host is not this one (RemoteSegment::same_host false)
  std::vector<proto::InlineEntry> entries;
  std::vector<void*> headers;
  std::vector<void*> values;
  std::vector<size_t> keys;
  uint64_t value_bytes = 0;
  // Entries on disk tiers (a group holds disk entries only, or none): a Write then names its
  // objects, as disk records keep them (proto::WriteRequest::tenant, keys): names[j] is
  // entries[j]'s key, `tenant` the writer's (set by TransferRouter).
  bool disk = false;
  bool alone = false;  // takes no other entry (a retry: one bad record fails its message only)
  std::vector<std::string> names;
  std::string tenant;
};
// Whether a value of `size` bytes, on `segment`, to or from memory of `device` (-1: host), goes
// inline: it is a host segment, the value is host memory, and either the segment's node is
// reached over tcp alone and the value is at most proto::kMaxInlineValue bytes, or the node
// takes messages only (PlanInputs::MessagesOnly) and the value is at most
// proto::kMaxMessageValue bytes; or it is a disk tier (messages only, whatever the transport),
// the value host memory of at most proto::kMaxDiskValue bytes (DiskValueError otherwise).
bool Inline(PlanInputs* inputs, const transport::RemoteSegment& segment, uint64_t size, int device);
// Adds an entry to the last group of `node` in *groups, or to a new one when there is none or
// it would pass proto::kMaxInlineMessage (a larger value gets a group of its own).
// `name`: the entry's key, for an entry on a disk tier (null otherwise): a group holds entries
// of disk tiers only, or of memory only. `alone`: the entry gets a group of its own.
void AddInline(const std::string& node, proto::InlineEntry entry, void* header, void* value,
               size_t key, std::vector<InlineGroup>* groups, bool other_host = false,
               const std::string* name = nullptr, bool alone = false);
// Why a value of `size` bytes to or from memory of `device` cannot move to or from a disk tier
// (FAILED_PRECONDITION), or OK when it can (Inline).
absl::Status DiskValueError(uint64_t size, int device);

// One batch of writes: the one-sided transfers to run (value and header of every replica of
// every key that got a place) and the keys to commit or give back afterwards. The transfers
// run through RmaEngine::CopyMapped first, which copies the ops whose segment is mapped into
// this process (same host) and leaves the rest to one-sided RMA: that choice depends on what
// the engine has mapped when they run, so it is made there, not here.
struct PutPlan {
  std::vector<transport::RmaOp> ops;
  std::vector<InlineGroup> writes;  // nodes over tcp: small values in Write messages
  proto::KeyGenRequest commit;      // PutEnd: the keys with every replica planned, in key order
  proto::KeyGenRequest revoke;      // PutRevoke: keys allocated but not writable (a segment gone)
};

// Plans the writes of keys[i] (data[i], sizes[i]) into the places `started` gives them: a
// small value to a node over tcp alone inline (plan->writes), the rest one-sided.
// (*out)[i] gets each key's status so far; (*headers)[i] the header written before each value
// (the ops point into it, so it must outlive them). Cost: two ops per replica, one
// registration lookup and one segment lookup per replica per key. devices (null: all host):
// per key, the device whose memory data[i] is, or -1; the value ops carry it (RmaOp::device).
void PlanPut(absl::Span<const std::string> keys, absl::Span<const void* const> data,
             absl::Span<const size_t> sizes, const proto::PutStartReply& started,
             PlanInputs* inputs, std::vector<proto::AllocHeader>* headers,
             std::vector<absl::Status>* out, PutPlan* plan,
             const std::vector<int>* devices = nullptr);

// ----- Get -----

// dest(i, size) returns where key i's value goes, or an error for that key.
using DestFn = std::function<absl::StatusOr<void*>(size_t i, uint64_t size)>;

// Reads that one node does over tcp alone, into one registered buffer: the node pushes the
// values (proto::PushRequest). keys: the batch indices, in the order of req.entries.
struct PushGroup {
  std::string node;
  proto::PushRequest req;
  std::vector<size_t> keys;
};

// One round of reads: for each key, which replica, and which path.
struct GetPlan {
  std::vector<transport::RmaOp> ops;  // one-sided, or mapped same-host copies (as PutPlan)
  std::vector<PushGroup> pushes;      // node pushes over tcp, one per (node, buffer)
  std::vector<InlineGroup> reads;     // nodes over tcp: small values in Read replies
  std::vector<size_t> fetched;        // keys read by ops or pushes, in order
  proto::KeyGenRequest release;       // GetEnd: the leases this round took
  std::vector<uint64_t> gens, lens;   // per batch index: what the header must say
};

// Plans round `attempt` (0 first) of reading keys[pending[j]] as reply.results[j] describes
// them. Keys that cannot be read get their status in (*out)[i]; the ops read each header into
// (*headers)[i]. Replica choice: (attempt + i) % replicas, so retries skip a dead node. Path:
// a node that takes messages only (another host over tcp) sends every host value in a Read
// reply, on every round; otherwise, on the first round, a node that is tcp-only sends a small
// value inline (Read) and pushes a larger one into a registered destination; otherwise
// (and on every retry, which works against any node) the value is read one-sided. devices
// (null: all host): per key, the device whose memory its destination is, or -1; such a key is
// never pushed, and its value op carries the device (RmaOp::device). prefer_gpu (GetOptions'
// tier hint): the replicas on GPU (true) or host (false) segments are read first.
void PlanGet(int attempt, absl::Span<const std::string> keys, absl::Span<const size_t> pending,
             const proto::GetReply& reply, const DestFn& dest, PlanInputs* inputs,
             std::vector<proto::AllocHeader>* headers, std::vector<absl::StatusOr<size_t>>* out,
             GetPlan* plan, const std::vector<int>* devices = nullptr,
             std::optional<bool> prefer_gpu = std::nullopt);

}  // namespace granary::client
