// device.h over the CUDA runtime (host C++; links CUDA::cudart).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "cuda/cuda_internal.h"
#include "cuda/device.h"

namespace granary::cuda {
namespace {

using internal::CudaStatus;
using internal::ScopedDevice;

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

absl::Status CheckPointer(const char* op, const char* name, const void* p, size_t n) {
  if (p != nullptr || n == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is null with n=", n));
}

// cudaMemcpy from pageable memory may return before the data reaches the device, and cudaMemset
// is asynchronous; waiting on the legacy default stream makes both complete on return, so that a
// later kernel on a non-blocking stream sees the bytes.
absl::Status WaitForDefaultStream(const char* op, int device) {
  return CudaStatus(cudaStreamSynchronize(cudaStreamLegacy),
                    absl::StrCat(op, ": synchronize device ", device));
}

absl::Status Copy(const char* op, int device, void* dst, const void* src, size_t n,
                  cudaMemcpyKind kind) {
  if (absl::Status s = CheckPointer(op, "dst", dst, n); !s.ok()) return s;
  if (absl::Status s = CheckPointer(op, "src", src, n); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  ScopedDevice scope;
  if (absl::Status s = scope.Enter(device); !s.ok()) return s;
  if (absl::Status s = CudaStatus(cudaMemcpy(dst, src, n, kind),
                                  absl::StrCat(op, "(device=", device, ", n=", n, ")"));
      !s.ok()) {
    return s;
  }
  return WaitForDefaultStream(op, device);
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
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace internal

bool BuiltWithCuda() { return true; }

int DeviceCount() { return GetInventory().count; }

bool Available() { return DeviceCount() > 0; }

absl::StatusOr<void*> DeviceAlloc(int device, size_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceAlloc(device=", device, "): bytes must be > 0, got 0"));
  }
  ScopedDevice scope;
  if (absl::Status s = scope.Enter(device); !s.ok()) return s;
  void* p = nullptr;
  if (absl::Status s = CudaStatus(cudaMalloc(&p, bytes), absl::StrCat("cudaMalloc(device=", device,
                                                                      ", bytes=", bytes, ")"));
      !s.ok()) {
    return s;
  }
  return p;
}

void DeviceFree(int device, void* p) {
  if (p == nullptr) return;
  ScopedDevice scope;
  if (!scope.Enter(device).ok()) return;
  if (cudaFree(p) != cudaSuccess) cudaGetLastError();
}

absl::Status CopyHostToDevice(int device, void* dst, const void* src, size_t n) {
  return Copy("CopyHostToDevice", device, dst, src, n, cudaMemcpyHostToDevice);
}

absl::Status CopyDeviceToHost(int device, void* dst, const void* src, size_t n) {
  return Copy("CopyDeviceToHost", device, dst, src, n, cudaMemcpyDeviceToHost);
}

absl::Status Memset(int device, void* p, int value, size_t n) {
  if (absl::Status s = CheckPointer("Memset", "p", p, n); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  ScopedDevice scope;
  if (absl::Status s = scope.Enter(device); !s.ok()) return s;
  if (absl::Status s = CudaStatus(cudaMemset(p, value, n),
                                  absl::StrCat("cudaMemset(device=", device, ", n=", n, ")"));
      !s.ok()) {
    return s;
  }
  return WaitForDefaultStream("Memset", device);
}

bool IsDevicePointer(const void* p) {
  if (p == nullptr || !Available()) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

absl::StatusOr<Stream> Stream::Create(int device) {
  ScopedDevice scope;
  if (absl::Status s = scope.Enter(device); !s.ok()) return s;
  cudaStream_t stream = nullptr;
  if (absl::Status s = CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                  absl::StrCat("cudaStreamCreate(device=", device, ")"));
      !s.ok()) {
    return s;
  }
  return Stream(device, stream);
}

absl::Status Stream::Synchronize() const {
  if (handle_ == nullptr) return absl::FailedPreconditionError("Synchronize on an empty Stream");
  return CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)),
                    absl::StrCat("cudaStreamSynchronize(device=", device_, ")"));
}

void Stream::Reset() {
  if (handle_ != nullptr) {
    ScopedDevice scope;
    if (scope.Enter(device_).ok()) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
  }
  device_ = -1;
  handle_ = nullptr;
}

}  // namespace granary::cuda
