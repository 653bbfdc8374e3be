#pragma once

// The client's paths for its own device buffers: GetInto, PutFrom
// and their batch forms given a CUDA device (or managed) pointer. Such a buffer is never touched
// by a CPU copy and never handed to a UCX without CUDA support (Debian's). Per op, after the GPU
// segments (client/gpu_segments.h, which copy device to device through IPC) have taken theirs:
//   host_segment  the replica's segment is mapped into this process (a node on this host, shared
//                 memory): the mapped node memory is pinned with the device backend lazily, in
//                 pieces of kPinPiece, under a byte cap (past the cap, or if pinning fails, the
//                 copy reads pageable memory: correct, slower), and the value is copied host to
//                 device (or device to host) straight from the node's memory on a backend
//                 stream; the batch's mapped get headers are read before that copy and again
//                 after it, and must be unchanged (a fenced read);
//   ucx           with a UCX that supports CUDA memory (never Debian's), instead of staging: the
//                 op stays for the caller's one-sided transfer, and UCX moves device memory;
//   staging       any other replica (another host, or a transport that maps nothing, such as
//                 UCX_TLS=tcp): through two pinned host slots of kSlotBytes per call, pipelined;
//                 a get reads chunk k+1 one-sided while chunk k is copied to the device; a put
//                 copies chunk k+1 from the device while chunk k is written. Values larger than a
//                 slot are split; small ones share a slot.
// Each value op counts once in granary_client_gpu_transfers_total{path} (ipc is counted by the
// caller for the GPU-segment ops with a device-local side).
//
// Thread-safe: each call takes its own stream and slots from pools guarded by mu_.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "client/stream_pool.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "device/device_backend.h"
#include "transport/rma.h"

namespace granary::client {

class EngineOrder;  // client/engine_order.h

// granary_client_gpu_transfers_total{path}: the values one path moved to or from this client's
// device buffers (ipc, host_segment, staging, bounce, ucx).
common::MetricCounter* GpuTransfersCounter(common::MetricsRegistry* metrics, const char* path);

class DeviceTransfers {
 public:
  // Runs one-sided ops (host memory on this side) against remote segments, within timeout_ms.
  using RemoteFn =
      std::function<absl::Status(std::vector<transport::RmaOp> ops, int64_t timeout_ms)>;

  static constexpr uint64_t kPinPiece = 1ull << 30;  // node memory pinned per registration
  static constexpr size_t kSlotBytes = 4u << 20;     // one staging slot
  static constexpr uint64_t kDefaultPinCap = 64ull << 30;

  // pin_cap: the most node memory this client pins (HostRegister) for host_segment copies.
  DeviceTransfers(common::MetricsRegistry* metrics, transport::RmaEngine* rma, uint64_t pin_cap);
  ~DeviceTransfers();
  DeviceTransfers(const DeviceTransfers&) = delete;
  DeviceTransfers& operator=(const DeviceTransfers&) = delete;

  // Whether any op has a device-local side (one load per op).
  static bool AnyDevice(const std::vector<transport::RmaOp>& ops);

  // Takes every op with device >= 0 out of *ops (GPU segments' ops must be gone already) and runs
  // them, mapped ones by device copies from the node's memory and the rest through staging,
  // `remote` moving the staged chunks; also takes and runs the batch's get headers on mapped
  // segments (the fence). The ops left in *ops are host-local (with set_direct_ucx: also the
  // device-local ops on unmapped segments, for the caller's transfer), in order. Returns when every
  // taken op is complete. Errors: UNAVAILABLE (a header changed during the read: retry), the
  // remote transfer's error, INTERNAL (a device copy failed, the backend's error named).
  // `order` (a put's DeviceWait, null: none): the streams that read the caller's device memory
  // wait for it first.
  [[nodiscard]] absl::Status Run(std::vector<transport::RmaOp>* ops, int64_t timeout_ms,
                                 const RemoteFn& remote, EngineOrder* order = nullptr);

  // Where UCX supports CUDA memory (the RmaEngine then moves device memory): Run leaves the ops
  // it would stage in *ops for the caller's one-sided transfer, counted as path "ucx". Set
  // once, before the first Run.
  void set_direct_ucx(common::MetricCounter* counted) { direct_ucx_ = counted; }

  // Unpins what was pinned in [local, local + size) (the RmaEngine's unmap hook).
  void Unmapped(void* local, uint64_t size);

  uint64_t pinned_bytes() const;

 private:
  struct Slots {
    device::DeviceRuntime* backend = nullptr;
    unsigned char* slot[2] = {nullptr, nullptr};
  };
  [[nodiscard]] absl::Status RunMapped(std::vector<transport::MappedOp>& values,
                                       std::vector<transport::MappedOp>& headers,
                                       EngineOrder* order);
  [[nodiscard]] absl::Status RunStaged(std::vector<transport::RmaOp>& ops, int64_t timeout_ms,
                                       const RemoteFn& remote, EngineOrder* order);
  [[nodiscard]] absl::StatusOr<Slots> TakeSlots(device::DeviceRuntime* backend);
  void ReturnSlots(Slots s);

  transport::RmaEngine* rma_;
  const uint64_t pin_cap_;
  mutable granary::common::Mutex mu_;
  // Pieces of mapped node memory: start -> {bytes, backend}. A null backend is a piece that
  // failed to pin (remembered) or, while `pending`, one a thread is registering now; pinned and
  // pending pieces count in pinned_bytes_.
  struct Piece {
    uint64_t bytes = 0;
    device::DeviceRuntime* backend = nullptr;
    bool pending = false;
  };
  std::map<uintptr_t, Piece> pinned_ ABSL_GUARDED_BY(mu_);
  uint64_t pinned_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  StreamPool streams_;
  std::vector<Slots> idle_slots_ ABSL_GUARDED_BY(mu_);
  common::MetricCounter* host_segment_;
  common::MetricCounter* staging_;
  common::MetricCounter* direct_ucx_ = nullptr;  // set_direct_ucx: non-null with a CUDA UCX
  common::MetricCounter* pin_failures_;
  common::MetricGauge* pinned_gauge_;
};

}  // namespace granary::client
