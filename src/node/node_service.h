#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "proto/messages.h"

namespace granary::node {

// One segment this node contributes, as the master sees it: where its bytes lie in this
// process's address space and the packed UCX remote key that lets peers reach them.
struct SegmentSpan {
  std::string name;   // node-unique; sent with MountSegment
  uint64_t base = 0;  // address of byte 0 (the segment's remote address too)
  uint64_t size = 0;
  proto::Tier tier = proto::Tier::kHost;
  std::string rkey;      // packed remote key; empty for a GPU segment (never mapped with UCX)
  std::string gpu_ipc;   // tier kGpu: the device backend's IPC export of byte 0
  std::string gpu_uuid;  // tier kGpu: the device's 16-byte UUID
  std::string nic;       // the NIC port that serves it (empty: UCX's choice)
  int numa_node = -1;    // the NUMA node its memory is bound to (-1: none)
  int gpu = -1;          // its device (GPU segments), or the GPU its NIC was paired for
};

// Who the node is, for its MountSegment requests in one master session.
struct MountIdentity {
  std::string node_id;
  std::string node_address;  // host:port of the node's listener
  std::string pool;          // tenant of a dedicated pool; empty = shared
  std::string worker_address;
  std::string host_id;
};

// The node's logic without its transport, as MasterService is the master's: the segments it
// contributes, whether each is mounted at the master in the current session (and under which
// id), and the checks that keep every Fetch and Push inside memory this node owns and inside
// the buffer the client offered. NodeServer (node_server.cc) is the UCX adapter that feeds it;
// tests drive it directly.
//
// Owned by NodeServer; lives as long as it. The segment list is fixed at construction, so the
// range checks read it without a lock (they run per request on the progress thread: a loop over
// the segments, no allocation, no lock). The mount state is guarded by mu_: the session thread
// changes it, anyone may read it. Thread-safe.
class NodeService {
 public:
  // `segments` must not overlap and must not wrap past the end of the address space.
  explicit NodeService(std::vector<SegmentSpan> segments);
  NodeService(const NodeService&) = delete;
  NodeService& operator=(const NodeService&) = delete;

  const std::vector<SegmentSpan>& segments() const { return segments_; }

  // --- Mount state. A segment is mounted in one master session, under the id the master gave
  // it then; a new session (a reconnect, or a restarted master) starts with none mounted.

  // A new master session starts: every segment is not mounted.
  void BeginSession();
  // The MountSegment request for segment `index`.
  // `resumed`: this node process mounted the segment at a master before (it may hold objects,
  // and the inventory report follows).
  proto::MountSegmentRequest MountRequest(size_t index, const MountIdentity& who,
                                          bool resumed = false) const;
  // The master mounted segment `index` as `segment_id` in the current session (0 = not
  // mounted, as before).
  void SetMounted(size_t index, uint64_t segment_id);
  // The id of segment `index` in the current session; 0 while not mounted.
  uint64_t segment_id(size_t index) const;
  // The segment the master knows as `segment_id` in the current session.
  std::optional<size_t> IndexOf(uint64_t segment_id) const;
  // Per segment (in segment order): its id in the current session, 0 while not mounted.
  std::vector<uint64_t> MountedIds() const;
  // The ids of the mounted segments, in segment order; they are not mounted afterwards (a
  // graceful unmount ends them whether or not the master answers).
  std::vector<uint64_t> TakeMounted();

  // --- Range checks (progress thread, per request; lock-free).

  // The index of the segment that holds [address, address + length) whole; nullopt when none
  // does or length is 0. No overflow: address + length is never computed.
  std::optional<size_t> SegmentHolding(uint64_t address, uint64_t length) const;
  // A Fetch writes req.length bytes at req.dest_address: that must lie inside one segment, and
  // the source must name a worker address and rkey. INVALID_ARGUMENT naming the range otherwise;
  // a disk tier (written in Write messages only) is FAILED_PRECONDITION.
  // A GPU segment is accepted: the node stages it (node/gpu_bounce.h), never handing it to UCX.
  [[nodiscard]] absl::Status CheckFetch(const proto::FetchRequest& req) const;
  // Whether address lies in a disk tier.
  bool DiskAt(uint64_t address) const;
  // A Push reads each entry's source (inside one segment), writes it at its destination (inside
  // the client's buffer req.dest) and then reads each header (inside one segment). On success
  // `sources` (cleared first) holds, per entry, the index of the segment its source lies in.
  // INVALID_ARGUMENT naming the first range that is outside otherwise. Sources and headers on
  // GPU segments are accepted (as in CheckFetch); a source on a disk tier (read in Read
  // messages only) is FAILED_PRECONDITION.
  [[nodiscard]] absl::Status CheckPush(const proto::PushRequest& req,
                                       std::vector<size_t>* sources) const;
  // A Read (what: "read") or Write ("write") names allocations: each entry's header and value,
  // [address, address + 64 + length), must lie whole inside one host segment, or its record
  // (at least DiskRecordBytes(0, 0, length)) inside one disk tier; the CPU copies them, so a
  // GPU segment is FAILED_PRECONDITION (its values move by Push and Fetch). Their
  // bytes must fit one frame, and a Write's data must hold exactly a header and a value per
  // entry (`data_bytes`; nullopt for a Read). INVALID_ARGUMENT naming the first bad entry.
  [[nodiscard]] absl::Status CheckInline(const char* what,
                                         const std::vector<proto::InlineEntry>& entries,
                                         std::optional<uint64_t> data_bytes) const;

 private:
  const std::vector<SegmentSpan> segments_;
  mutable granary::common::Mutex mu_;
  // Per segment: its id in the current master session, 0 while not mounted.
  std::vector<uint64_t> master_ids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace granary::node
