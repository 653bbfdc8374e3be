#pragma once

// The client's same-host path to the nodes' GPU segments (CUDA IPC): device
// memory a node allocated and exported through its device backend. Such a segment is never
// handed to UCX and never touched by a CPU copy: this opens the node's IPC handle once per
// segment, through the process's device backend (device/device_backend.h: cuda, or the CPU-only
// fake), and runs the transfers as device copies on a backend stream.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/stream_pool.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "device/device_backend.h"
#include "transport/rma.h"

namespace granary::client {

class EngineOrder;  // client/engine_order.h

// Owned by ClientImpl; lives as long as it. A segment is mapped on the device of the caller's
// buffer (for host buffers, on the segment's own device), so that no other GPU of the process
// gets a context; a batch over segments mapped on several devices runs a stream on each. The
// mappings are cached per (segment id, buffer device) and closed when the segment's IPC handle
// changes (a node re-mounted under the same id) and when this object is destroyed. A failed open
// is remembered for kRetryOpenAfter: until then the segment's transfers go to the node bounce
// without another open or log line. Thread-safe: mu_ guards the caches; copies run outside it, on a
// stream each caller takes from the pool for its batch. A mapping is closed only when no batch
// holds it (shared ownership), so a concurrent re-open never unmaps memory a copy still uses.
class GpuSegments {
 public:
  explicit GpuSegments(common::MetricsRegistry* metrics);
  ~GpuSegments();
  GpuSegments(const GpuSegments&) = delete;
  GpuSegments& operator=(const GpuSegments&) = delete;

  // Whether any op of the batch is on a GPU segment: one load per op, no lock (the common, host
  // path pays only this).
  static bool AnyGpu(const std::vector<transport::RmaOp>& ops);

  // Removes from *ops every op whose segment is a GPU segment and runs those it can map:
  // device copies on one backend stream, in the ops' order (a value before its header on a put;
  // the header before the value on a get), complete when it returns. A get's headers are copied
  // again after the values (into scratch host memory) and must be unchanged, so a header that
  // the caller checks afterwards vouches for the bytes read before it (a fenced read). The ops
  // on segments it cannot map (another host, no local device with the segment's UUID, or an IPC
  // open that failed: granary_client_gpu_fallback_total) are appended to *bounced, in order,
  // for the node bounce (client/gpu_bounce.h). The other ops are left in *ops, in order.
  // Errors, for the whole batch (nothing half-done is reported as done):
  //   INVALID_ARGUMENT     an op outside the segment;
  //   UNAVAILABLE          a header changed during the read (retry);
  //   INTERNAL             a device copy failed (the backend's error in the message).
  // `order` (a put's DeviceWait, null: none): the copy stream waits for it before the copies.
  [[nodiscard]] absl::Status Run(std::vector<transport::RmaOp>* ops,
                                 std::vector<transport::RmaOp>* bounced,
                                 EngineOrder* order = nullptr);

  // Closes the mappings of segments not in `mounted` (unmounted at the master), each once no
  // batch holds it. Thread-safe.
  void Retain(const absl::flat_hash_set<uint64_t>& mounted);

  // How long a failed IPC open is remembered before a batch tries again.
  static constexpr absl::Duration kRetryOpenAfter = absl::Seconds(30);

 private:
  struct Mapping;
  // A segment id and the device of the buffers it is mapped for (-1: host buffers).
  using Key = std::pair<uint64_t, int>;
  struct Failed {
    std::string ipc;  // the handle that failed
    absl::Time retry_at;
    std::string why;
  };
  static absl::flat_hash_map<const transport::RemoteSegment*, int> BufferDevices(
      const std::vector<transport::RmaOp>& gpu);
  [[nodiscard]] absl::Status RunOnDevice(
      const std::vector<transport::RmaOp>& gpu,
      const absl::flat_hash_map<const transport::RemoteSegment*, int>& on, EngineOrder* order);
  // The mapping of `seg` for buffers on `buffer_device` (-1: host buffers).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Mapping>> Open(const transport::RemoteSegment& seg,
                                                              int buffer_device);
  [[nodiscard]] absl::StatusOr<int> LocalDevice(device::DeviceRuntime& backend,
                                                const std::string& uuid);

  granary::common::Mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<Mapping>> mapped_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Key, Failed> failed_ ABSL_GUARDED_BY(mu_);
  StreamPool streams_;
  common::MetricCounter* opened_;
  common::MetricCounter* failures_;
  common::MetricCounter* fallbacks_;
};

}  // namespace granary::client
