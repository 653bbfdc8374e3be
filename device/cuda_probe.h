#pragma once

// Private to device/: what the backend choice needs to know about the CUDA runtime, defined by
// cuda_runtime.cc in a CUDA build and by cuda_stub.cc without one.

#include "absl/status/status.h"

namespace granary::device::internal {

// OK when the CUDA runtime has a usable device; otherwise FAILED_PRECONDITION saying why
// (kNoCudaMessage in a build without CUDA, cudaGetDeviceCount's answer in one with it).
absl::Status CudaUnavailableReason();

}  // namespace granary::device::internal
