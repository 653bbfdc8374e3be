#include "client/device_check.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "granary/device_pointer.h"

namespace granary::client {

absl::Status DevicePointerError(const void* p, size_t n) {
  return WithReason(
      absl::InvalidArgumentError(absl::StrCat(
          "buffer 0x", absl::Hex(reinterpret_cast<uintptr_t>(p)), " (", n,
          " bytes) is CUDA device memory; this build has no GPU path for it yet, so it is "
          "refused untouched (pass host memory)")),
      ErrorReason::kDevicePointer);
}

absl::Status CheckHostMemory(const void* p, size_t n) {
  return IsDevicePointer(p, n) ? DevicePointerError(p, n) : absl::OkStatus();
}

}  // namespace granary::client
