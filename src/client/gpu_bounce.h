#pragma once

// The client's side of the node bounce (node/gpu_bounce.h): transfers to and from a
// node's GPU segment that this process cannot map (the segment is on another host, no local
// device has its UUID, or opening its IPC handle failed). The node stages them through its own
// pinned slots (node/gpu_bounce.h); this client hands it two slots of its own, registered with
// UCX, and keeps both busy:
//   get  one Push per slot-sized chunk of values (small values share a chunk, large ones are
//        split), the headers asked with the last chunk (the node reads them after every value
//        has been written). The Push of chunk k+1 (into the other slot) is in flight while
//        chunk k is copied from its slot to its destinations (device memory through the device
//        backend, host memory with memcpy).
//   put  the values are copied into a slot, as many as fit, and the node fetches each (all of a
//        slot's Fetches in flight at once); meanwhile the next values are copied into the other
//        slot. A value that fits in a slot with its header travels with it in one Fetch
//        ([header | value], the node writes the header last); a larger one is split, and its
//        header follows in a Fetch of its own once every value's Fetch has been answered. The
//        node answers a Fetch only once its bytes are in the segment, so a PutEnd after Run never
//        commits bytes still in flight.
// Thread-safe: each call takes its slots from a pool (made on demand, kept for reuse). The slots
// of a failed transfer are retired, never reused: the node may still write into them late.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
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
  // Asynchronous node calls: `done` runs once, on any thread (the caller's when the call cannot
  // be sent), with the node's error (naming the node) or, for a Push, its header bytes
  // (kAllocHeaderSize per requested header).
  using PushDone = std::function<void(absl::StatusOr<std::string>)>;
  using PushFn =
      std::function<void(const std::string& node, const proto::PushRequest& req, PushDone done)>;
  using FetchDone = std::function<void(absl::Status)>;
  using FetchFn =
      std::function<void(const std::string& node, const proto::FetchRequest& req, FetchDone done)>;

  // `registrations` registers the slots (and must outlive this object).
  GpuBounce(common::MetricsRegistry* metrics, Registrations* registrations);
  ~GpuBounce();
  GpuBounce(const GpuBounce&) = delete;
  GpuBounce& operator=(const GpuBounce&) = delete;

  // Runs `ops` (all on GPU segments) through the nodes that hold them, in order per node; a
  // get's header ops are filled from the Push replies. node_timeout_ms goes into each request;
  // each wait for the node's answers gives up after timeout_ms (DEADLINE_EXCEEDED).
  // Errors: the node's (with its name), INTERNAL for a device copy on this side, or the slot's
  // allocation or registration.
  [[nodiscard]] absl::Status Run(std::vector<transport::RmaOp> ops, uint32_t node_timeout_ms,
                                 int64_t timeout_ms, const PushFn& push, const FetchFn& fetch);

 private:
  struct Slot {
    unsigned char* data = nullptr;
    bool pinned = false;  // from the device backend (else aligned host memory)
  };
  class Flight;
  struct Job;
  // Copies n bytes between host memory and `device`'s memory (-1: both host), on a pooled
  // stream of the device, waited for. INTERNAL names the device on failure.
  [[nodiscard]] absl::Status CopyLocal(int device, void* dst, const void* src, size_t n);
  [[nodiscard]] absl::StatusOr<Slot> TakeSlot();
  void ReturnSlot(Slot s);
  void FreeSlot(Slot s);
  // Slot i of the job (0 or 1), taken and looked up on first use.
  [[nodiscard]] absl::StatusOr<unsigned char*> JobSlot(Job* job, int i);
  [[nodiscard]] absl::Status RunGets(Job* job, const std::string& node,
                                     const std::vector<transport::RmaOp>& ops, const PushFn& push);
  [[nodiscard]] absl::Status RunPuts(Job* job, const std::string& node,
                                     const std::vector<transport::RmaOp>& ops,
                                     const FetchFn& fetch);

  Registrations* const registrations_;
  granary::common::Mutex mu_;
  std::vector<Slot> idle_ ABSL_GUARDED_BY(mu_);
  std::vector<Slot> retired_slots_ ABSL_GUARDED_BY(mu_);  // after a failed transfer: leaked
  // Streams CopyLocal is not using, per device (created on demand, destroyed with this object).
  absl::flat_hash_map<int, std::vector<void*>> idle_streams_ ABSL_GUARDED_BY(mu_);
  common::MetricCounter* values_;
  common::MetricCounter* retired_;
};

}  // namespace granary::client
