#pragma once

// The node bounce: Push out of and Fetch into this node's GPU
// segments for clients that cannot open a segment's IPC handle (another host, or an open that
// failed). Device memory is never handed to UCX and never touched by a CPU copy: a job copies
// between the segment and two pinned host slots registered with UCX, and moves the slots' bytes
// one-sided to or from the client's registered buffer, pipelined:
//   push   the device-to-host copy of chunk k+1 overlaps the write of chunk k to the client;
//          the allocation headers are copied to host memory after every value has been written
//          (so a header that still matches vouches for the bytes sent before it);
//   fetch  the read of chunk k+1 from the client overlaps the host-to-device copy of chunk k.
//          The first kAllocHeaderSize bytes (an allocation's header) are copied last, and the
//          fetch is answered only once every host-to-device copy has completed (the stream
//          synchronized), so a PutEnd never commits bytes still in flight.
// Host-memory sources of a push (a host segment) are copied into the slots with memcpy.
//
// One worker thread runs the jobs in order (FIFO). Thread-safe. Stop() before the RmaEngine
// goes (a job in progress gives up its waits); destroy before the transport Context (the slots'
// registrations) and before the GPU segments.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "device/device_backend.h"
#include "transport/context.h"
#include "transport/memory.h"
#include "transport/rma.h"

namespace granary::node {

class GpuBounce {
 public:
  static constexpr size_t kDefaultSlotBytes = 4u << 20;

  // One piece of a job: device memory of `device` (or host memory, device -1) at `node_addr`,
  // and the client's buffer at `peer_addr`.
  struct Part {
    int device = -1;
    uint64_t node_addr = 0;
    uint64_t peer_addr = 0;
    uint64_t length = 0;
  };
  struct Header {
    int device = -1;
    uint64_t addr = 0;
  };
  // Push: parts written to `peer`, then `headers` copied out; done(status, header bytes).
  struct PushJob {
    std::shared_ptr<const transport::RemoteSegment> peer;
    std::vector<Part> parts;
    std::vector<Header> headers;
    int64_t timeout_ms = 10'000;
  };
  using PushDone = std::function<void(absl::Status, std::string headers)>;
  // Fetch: one part read from `peer` into device memory.
  struct FetchJob {
    std::shared_ptr<const transport::RemoteSegment> peer;
    Part part;
    int64_t timeout_ms = 10'000;
  };
  using FetchDone = std::function<void(absl::Status)>;

  // Allocates and registers the two slots. Errors: the backend's (pinned memory) or UCX's.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<GpuBounce>> Create(
      device::DeviceRuntime* backend, transport::Context* ctx, transport::RmaEngine* rma,
      common::MetricsRegistry* metrics, size_t slot_bytes = kDefaultSlotBytes);
  ~GpuBounce();
  GpuBounce(const GpuBounce&) = delete;
  GpuBounce& operator=(const GpuBounce&) = delete;

  // Queue a job; `done` runs on the worker thread (CANCELLED once stopped).
  void Push(PushJob job, PushDone done);
  void Fetch(FetchJob job, FetchDone done);
  // Answers the queued jobs CANCELLED, makes a running job give up its waits, joins the worker.
  // Idempotent.
  void Stop();

 private:
  struct Slot {
    unsigned char* data = nullptr;
    std::unique_ptr<transport::MemoryRegion> region;
  };
  struct Job;
  GpuBounce(device::DeviceRuntime* backend, transport::Context* ctx, transport::RmaEngine* rma,
            common::MetricsRegistry* metrics, size_t slot_bytes);
  [[nodiscard]] absl::Status AllocateSlots();
  void FreeSlots();
  void Enqueue(std::unique_ptr<Job> j);
  static void Cancel(Job& j);  // answers CANCELLED
  void Loop();
  [[nodiscard]] absl::Status RunPush(const PushJob& job, std::string* headers);
  [[nodiscard]] absl::Status RunFetch(const FetchJob& job);
  // The stream and two events of `device`, made on first use.
  [[nodiscard]] absl::Status DeviceStream(int device, void** stream, void** events);
  // Runs one-sided ops against the peer; waits until they complete or `deadline` passes (then
  // the slots may still be in use by UCX: they are abandoned, and fresh ones made).
  [[nodiscard]] absl::Status Remote(std::vector<transport::RmaOp> ops,
                                    std::chrono::steady_clock::time_point deadline);

  device::DeviceRuntime* const backend_;
  transport::Context* const ctx_;
  transport::RmaEngine* const rma_;
  const size_t slot_bytes_;
  Slot slots_[2];  // the worker's only
  struct Streams {
    int device = -1;
    void* stream = nullptr;
    void* events[2] = {nullptr, nullptr};
  };
  std::vector<Streams> streams_;  // the worker's only

  granary::common::Mutex mu_;
  std::deque<std::unique_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
  common::MetricCounter* pushes_;
  common::MetricCounter* fetches_;
  common::MetricCounter* failures_;
  common::MetricCounter* bytes_;
};

}  // namespace granary::node
