#pragma once

// The runtime half of a device backend (device_backend.h): device and pinned memory, pointer
// classification, synchronous copies, streams, events and IPC, as the CUDA runtime offers them.
// Granary's own kernels on that memory and those streams are the other half (kv_kernels.h).
//
// This header is CUDA-free. Streams and events are opaque handles of the runtime that created
// them: for `cuda` a stream is a cudaStream_t and an event a cudaEvent_t; a handle of one backend
// must never be passed to another.
//
// Error codes, as device.h documents: FAILED_PRECONDITION when the backend cannot do it at all
// (no CUDA, no device, strict pinned mode refusing pageable memory); INVALID_ARGUMENT for a bad
// value, which the message names; RESOURCE_EXHAUSTED when memory runs out; UNAVAILABLE when the
// exporter of an IPC handle is gone; INTERNAL for any other device error (for `cuda` the CUDA
// error name and text are in the message).
//
// Thread safety: every method of every implementation may be called from any thread.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/copy_region.h"

namespace granary::device {

// What a pointer points into, as cudaPointerGetAttributes reports it.
enum class MemoryKind {
  kHost,        // pageable host memory (or an address no backend knows)
  kPinnedHost,  // page-locked host memory: HostAllocPinned or HostRegister
  kDevice,      // device memory of PointerInfo::device
  kManaged,     // managed (unified) memory, addressable by the CPU and the device
};

// "host", "pinned_host", "device", "managed".
absl::string_view MemoryKindName(MemoryKind kind);

struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;  // the owning device for kDevice and kManaged; -1 otherwise
};

// The direction of a synchronous copy (device.h's CopyHostToDevice and CopyDeviceToHost).
// kDefault infers it from the pointers, as cudaMemcpyDefault does.
enum class CopyKind { kHostToDevice, kDeviceToHost, kDefault };

// Bounds on ExportIpc's blob: a caller may store or send it in a fixed slot.
inline constexpr size_t kMaxIpcBlobBytes = 128;

using DeviceUuid = std::array<uint8_t, 16>;

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  // "cuda", "none" or "fake": the backend's name.
  virtual absl::string_view Name() const = 0;

  // Usable devices; 0 for `none`.
  virtual int DeviceCount() = 0;

  // Device memory of `bytes` (> 0) on `device`; freed with Free(device, p). A null `p` is a
  // no-op; Free never fails visibly (a broken context shows at the next fallible call).
  [[nodiscard]] virtual absl::StatusOr<void*> Alloc(int device, size_t bytes) = 0;
  // Managed memory: the CPU and `device` may both address it. Freed with Free.
  [[nodiscard]] virtual absl::StatusOr<void*> AllocManaged(int device, size_t bytes) = 0;
  virtual void Free(int device, void* p) = 0;

  // Page-locked host memory (cudaHostAlloc, portable to every device); freed with
  // HostFreePinned. HostRegister pins existing host memory [p, p + n) until HostUnregister(p).
  [[nodiscard]] virtual absl::StatusOr<void*> HostAllocPinned(size_t bytes) = 0;
  virtual void HostFreePinned(void* p) = 0;
  [[nodiscard]] virtual absl::Status HostRegister(void* p, size_t n) = 0;
  [[nodiscard]] virtual absl::Status HostUnregister(void* p) = 0;

  // Never fails: an address the backend does not know is kHost. Initializes nothing and creates
  // no context (cuda asks the driver, device/driver_api.h), so classifying host memory leaves a
  // host-only process free of CUDA.
  virtual PointerInfo Classify(const void* p) = 0;

  // Synchronous copies and memset, for setup and tests (device.h): complete on return, visible
  // to work on any stream. Host memory may be pageable. n == 0 is a no-op.
  [[nodiscard]] virtual absl::Status Copy(int device, void* dst, const void* src, size_t n,
                                          CopyKind kind) = 0;
  [[nodiscard]] virtual absl::Status Memset(int device, void* p, int value, size_t n) = 0;

  // Streams: asynchronous, FIFO, not ordered with any other stream. Where a call takes a
  // `stream`, nullptr is the default stream: for the fake, the call runs before returning; for
  // cuda, the legacy default stream, where copies stay asynchronous (SynchronizeStream(nullptr)
  // waits) and the kernels wait before returning, as kv_layout.h says.
  [[nodiscard]] virtual absl::StatusOr<void*> CreateStream(int device) = 0;
  // Does not wait; work already enqueued still completes.
  virtual void DestroyStream(void* stream) = 0;
  // Waits until everything enqueued so far has completed; reports the first asynchronous error.
  [[nodiscard]] virtual absl::Status SynchronizeStream(void* stream) = 0;

  // Enqueues a copy of each of regions[0..n) on `stream`, in order, on the copy engine (not a
  // kernel), the direction inferred from the pointers (cudaMemcpyDefault). Errors found at
  // enqueue time are returned (INVALID_ARGUMENT names the region); the copies' own errors show at
  // SynchronizeStream or an event.
  [[nodiscard]] virtual absl::Status BatchCopyAsync(void* stream, const CopyRegion* regions,
                                                    int n) = 0;
  // One region of BatchCopyAsync: n bytes from src to dst.
  [[nodiscard]] absl::Status CopyAsync(void* stream, void* dst, const void* src, size_t n) {
    const CopyRegion region{src, dst, n};
    return BatchCopyAsync(stream, &region, 1);
  }

  // Runs `fn` on a backend thread once the work enqueued on `stream` before it has completed;
  // later work waits for it. `fn` must not call the backend (as with cudaLaunchHostFunc).
  [[nodiscard]] virtual absl::Status LaunchHostFunc(void* stream, std::function<void()> fn) = 0;

  // Events. An event completes when the work enqueued on its stream before RecordEvent has; an
  // event never recorded counts as done.
  [[nodiscard]] virtual absl::StatusOr<void*> CreateEvent(int device) = 0;
  virtual void DestroyEvent(void* event) = 0;
  [[nodiscard]] virtual absl::Status RecordEvent(void* event, void* stream) = 0;
  // True when complete; an error when the work before it failed.
  [[nodiscard]] virtual absl::StatusOr<bool> EventDone(void* event) = 0;
  // Blocks the calling thread until the event completes.
  [[nodiscard]] virtual absl::Status WaitEvent(void* event) = 0;
  // Makes later work on `stream` wait for the event (no host wait).
  [[nodiscard]] virtual absl::Status StreamWaitEvent(void* stream, void* event) = 0;

  // IPC. ExportIpc turns a device pointer (into an allocation of this backend) into an opaque
  // blob of at most kMaxIpcBlobBytes that another process passes to OpenIpc, which maps the same
  // bytes on `device` there and returns the pointer matching `p`; CloseIpc(mapped) unmaps it.
  // A process never opens its own export (CUDA refuses that too).
  [[nodiscard]] virtual absl::StatusOr<std::string> ExportIpc(const void* p) = 0;
  [[nodiscard]] virtual absl::StatusOr<void*> OpenIpc(int device, absl::string_view blob) = 0;
  [[nodiscard]] virtual absl::Status CloseIpc(void* mapped) = 0;

  // The device's 16-byte UUID (nvidia-smi's GPU-... id).
  [[nodiscard]] virtual absl::StatusOr<DeviceUuid> DeviceUuidOf(int device) = 0;
};

}  // namespace granary::device
