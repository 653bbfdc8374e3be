#include "client/device_check.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "device/device_backend.h"
#include "granary/device_pointer.h"

namespace granary::client {

absl::Status DevicePointerError(const void* p, size_t n) {
  return common::WithReason(
      absl::InvalidArgumentError(absl::StrCat(
          "buffer 0x", absl::Hex(reinterpret_cast<uintptr_t>(p)), " (", n,
          " bytes) is CUDA device memory that this process's device backend (",
          device::ActiveBackendName(),
          ") cannot copy, so it is refused untouched (pass host memory, or run where the cuda "
          "backend is usable)")),
      ErrorReason::kDevicePointer);
}

absl::Status CheckHostMemory(const void* p, size_t n) {
  return IsDevicePointer(p, n) ? DevicePointerError(p, n) : absl::OkStatus();
}

absl::StatusOr<int> BufferDevice(const void* p, size_t n) {
  if (n == 0) return -1;
  device::DeviceRuntime& backend = device::ActiveRuntime();
  if (backend.Name() != "none") {
    const device::PointerInfo first = backend.Classify(p);
    if (first.kind == device::MemoryKind::kDevice || first.kind == device::MemoryKind::kManaged) {
      const device::PointerInfo last = backend.Classify(static_cast<const char*>(p) + (n - 1));
      if (last.kind != first.kind || last.device != first.device) return DevicePointerError(p, n);
      return first.device >= 0 ? first.device : 0;
    }
  }
  return IsDevicePointer(p, n) ? absl::StatusOr<int>(DevicePointerError(p, n)) : -1;
}

}  // namespace granary::client
