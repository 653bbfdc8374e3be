#pragma once

// Private to device/ and compiled only with CUDA: turning CUDA errors into absl::Status, and
// entering a device for the length of one call. Host C++ only (never included by kernels.cu).

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace granary::device::internal {

// OK for cudaSuccess; otherwise a Status whose message is "<what>: <cudaErrorName>: <text>",
// with the code chosen as device.h documents. Also clears CUDA's last-error slot for a
// non-sticky error so that a later call does not report it again.
[[nodiscard]] absl::Status CudaStatus(cudaError_t err, absl::string_view what);

// Checks that `device` is a usable device index: FAILED_PRECONDITION (with the reason CUDA gave)
// when there is none at all, INVALID_ARGUMENT naming the index when it is out of range.
[[nodiscard]] absl::Status CheckDevice(int device);

// Usable CUDA devices (cudaGetDeviceCount, once per process; 0 when it fails).
int CudaDeviceCount();

// Makes a device current for the calling thread until destruction, then restores the device
// that was current before (only if it changed). One scope per call; not movable; not shared
// between threads. Cost: cudaGetDevice plus at most two cudaSetDevice (no allocation).
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice();

  // CheckDevice(device), then cudaSetDevice(device). Call at most once.
  [[nodiscard]] absl::Status Enter(int device);

 private:
  int previous_ = -1;  // device to restore; -1 when nothing was changed
};

}  // namespace granary::device::internal
