// The CUDA runtime's shared pieces (cuda_internal.h): turning errors into Status, the device
// inventory, entering a device. Host C++; links CUDA::cudart. The backend is cuda_backend.cc.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "device/cuda_internal.h"
#include "device/cuda_probe.h"
#include "device/device.h"

namespace granary::device {
namespace {

// The device count and, when it is 0, why. Computed once: CUDA does not add devices to a
// running process.
struct Inventory {
  int count = 0;
  cudaError_t error = cudaSuccess;
};

const Inventory& GetInventory() {
  static const Inventory inventory = [] {
    Inventory inv;
    inv.error = cudaGetDeviceCount(&inv.count);
    if (inv.error != cudaSuccess) {
      inv.count = 0;
      cudaGetLastError();  // cudaGetDeviceCount's errors are not sticky; clear the slot.
    }
    return inv;
  }();
  return inventory;
}

}  // namespace

namespace internal {

absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  // Reading the slot resets it for non-sticky errors; sticky ones (a broken context) stay and
  // every later call reports them, which is what we want.
  cudaGetLastError();
  const std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
      return absl::InvalidArgumentError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CheckDevice(int device) {
  const Inventory& inv = GetInventory();
  if (inv.count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no usable CUDA device (asked for device ", device, "): ",
                     inv.error == cudaSuccess
                         ? std::string("cudaGetDeviceCount found none")
                         : absl::StrCat("cudaGetDeviceCount failed: ", cudaGetErrorName(inv.error),
                                        ": ", cudaGetErrorString(inv.error))));
  }
  if (device < 0 || device >= inv.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " is out of range [0, ", inv.count, ")"));
  }
  return absl::OkStatus();
}

absl::Status ScopedDevice::Enter(int device) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  int current = -1;
  if (absl::Status s = CudaStatus(cudaGetDevice(&current), "cudaGetDevice"); !s.ok()) return s;
  if (current == device) return absl::OkStatus();
  if (absl::Status s =
          CudaStatus(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")"));
      !s.ok()) {
    return s;
  }
  previous_ = current;
  return absl::OkStatus();
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace internal

bool BuiltWithCuda() { return true; }

namespace internal {

int CudaDeviceCount() { return GetInventory().count; }

absl::Status CudaUnavailableReason() { return CheckDevice(0); }

}  // namespace internal
}  // namespace granary::device
