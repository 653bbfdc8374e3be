// The CUDA-less build: there is no cuda backend, and the none backend says why. Compiled instead
// of cuda_runtime.cc, cuda_backend.cc, cuda_kernels.cc and kernels.cu when GRANARY_HAVE_CUDA is
// OFF.

#include "device/cuda_probe.h"
#include "device/device.h"
#include "device/device_backend.h"

namespace granary::device {

bool BuiltWithCuda() { return false; }

DeviceBackend* CudaBackend() { return nullptr; }

namespace internal {

absl::Status CudaUnavailableReason() { return absl::FailedPreconditionError(kNoCudaMessage); }

}  // namespace internal
}  // namespace granary::device
