#pragma once

// The client's side of the node bounce (../shared/GPU.md section 4): transfers to and from a
// node's GPU segment that this process cannot map (the segment is on another host, no local
// device has its UUID, or opening its IPC handle failed). The node stages them through its own
// pinned slots (node/gpu_bounce.h); this client hands it a slot of its own, registered with UCX:
//   get  one Push per slot-sized chunk of values (small values share a chunk, large ones are
//        split), the headers asked with the last chunk (the node reads them after every value
//        has been written); each chunk copied from the slot to its destination (device memory
//        through the device backend, host memory with memcpy);
//   put  each value copied into the slot and fetched by the node, which answers only once it
//        has copied it into the segment; a value that fits in the slot with its header travels
//        with it in one Fetch ([header | value], the node writes the header last), else the
//        header follows its value in a Fetch of its own. A PutEnd after Run therefore never
//        commits bytes still in flight.
// Thread-safe: each call takes a slot from a pool (made on demand, kept for reuse). A slot whose
// transfer failed is retired, never reused: the node may still write into it late.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/registrations.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "proto/messages.h"
#include "transport/rma.h"

namespace granary::client {

class GpuBounce {
 public:
  static constexpr size_t kSlotBytes = 4u << 20;
  // The node's reply to a Push: its header bytes, kAllocHeaderSize per requested header.
  using PushFn = std::function<absl::StatusOr<std::string>(const std::string& node,
                                                           const proto::PushRequest& req)>;
  using FetchFn =
      std::function<absl::Status(const std::string& node, const proto::FetchRequest& req)>;

  // `registrations` registers the slots (and must outlive this object).
  GpuBounce(MetricsRegistry* metrics, Registrations* registrations);
  ~GpuBounce();
  GpuBounce(const GpuBounce&) = delete;
  GpuBounce& operator=(const GpuBounce&) = delete;

  // Runs `ops` (all on GPU segments) through the nodes that hold them, in order per node; a
  // get's header ops are filled from the Push replies. node_timeout_ms goes into each request.
  // Errors: the node's (with its name), INTERNAL for a device copy on this side, or the slot's
  // allocation or registration.
  [[nodiscard]] absl::Status Run(std::vector<transport::RmaOp> ops, uint32_t node_timeout_ms,
                                 const PushFn& push, const FetchFn& fetch);

 private:
  struct Slot {
    unsigned char* data = nullptr;
    bool pinned = false;  // from the device backend (else aligned host memory)
  };
  [[nodiscard]] absl::StatusOr<Slot> TakeSlot();
  void ReturnSlot(Slot s);
  void FreeSlot(Slot s);
  [[nodiscard]] absl::Status RunGets(const std::string& node,
                                     const std::vector<transport::RmaOp>& ops, unsigned char* slot,
                                     const proto::SegmentInfo& target, uint32_t timeout_ms,
                                     const PushFn& push);
  [[nodiscard]] absl::Status RunPuts(const std::string& node,
                                     const std::vector<transport::RmaOp>& ops, unsigned char* slot,
                                     const proto::SegmentInfo& target, uint32_t timeout_ms,
                                     const FetchFn& fetch);

  Registrations* const registrations_;
  granary::Mutex mu_;
  std::vector<Slot> idle_ ABSL_GUARDED_BY(mu_);
  std::vector<Slot> retired_slots_ ABSL_GUARDED_BY(mu_);  // after a failed transfer: leaked
  MetricCounter* values_;
  MetricCounter* retired_;
};

}  // namespace granary::client
