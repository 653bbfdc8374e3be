// The cuda device backend (device_backend.h): its runtime over the CUDA runtime, and its kernels
// (cuda_kernels.h). Host C++; links CUDA::cudart. Streams are cudaStream_t and events cudaEvent_t,
// passed as void*.

#include <cuda_runtime_api.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "device/cuda_internal.h"
#include "device/cuda_kernels.h"
#include "device/device_backend.h"
#include "device/driver_api.h"
#include "device/kv_regions.h"

namespace granary::device {
namespace {

using internal::CudaStatus;
using internal::ScopedDevice;

std::string Addr(const void* p) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
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

// The device a stream belongs to, entered for the length of one call.
absl::Status EnterStreamDevice(ScopedDevice& scope, void* stream, const char* op) {
  if (stream == nullptr) return absl::OkStatus();
  int device = -1;
  if (absl::Status s = CudaStatus(cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &device),
                                  absl::StrCat(op, ": cudaStreamGetDevice"));
      !s.ok()) {
    return s;
  }
  return scope.Enter(device);
}

// The blob of ExportIpc: the runtime's handle of the whole allocation, plus where `p` sits in it.
constexpr char kIpcMagic[8] = {'G', 'R', 'C', 'U', 'D', 'A', 'I', '1'};
struct IpcWire {
  char magic[8];
  cudaIpcMemHandle_t handle;
  uint64_t offset;
  uint64_t size;
  int32_t device;
  uint8_t uuid[16];
};
static_assert(sizeof(IpcWire) <= kMaxIpcBlobBytes);

// cuMemGetAddressRange through the runtime's driver entry point, so that nothing links libcuda:
// the base and size of the allocation holding p. (CUresult and CUdeviceptr spelled as int and
// unsigned long long, their definitions in cuda.h.)
absl::Status AllocationRange(const void* p, uintptr_t* base, size_t* size) {
  using GetRange = int (*)(unsigned long long*, size_t*, unsigned long long);
  static GetRange const get_range = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<GetRange>(nullptr);
    }
    return reinterpret_cast<GetRange>(fn);
  }();
  if (get_range == nullptr) {
    return absl::InternalError("ExportIpc: the driver has no cuMemGetAddressRange");
  }
  unsigned long long b = 0;
  if (int err = get_range(&b, size, reinterpret_cast<uintptr_t>(p)); err != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ExportIpc: ", Addr(p), " is not in a device allocation (CUresult ", err, ")"));
  }
  *base = static_cast<uintptr_t>(b);
  return absl::OkStatus();
}

void CUDART_CB RunHostFunc(void* data) {
  auto* fn = static_cast<std::function<void()>*>(data);
  (*fn)();
  delete fn;
}

class CudaRuntime final : public DeviceRuntime {
 public:
  absl::string_view Name() const override { return "cuda"; }
  int DeviceCount() override { return internal::CudaDeviceCount(); }

  absl::StatusOr<void*> Alloc(int device, size_t bytes) override {
    return AllocWith("cudaMalloc", device, bytes,
                     [](void** p, size_t n) { return cudaMalloc(p, n); });
  }

  absl::StatusOr<void*> AllocManaged(int device, size_t bytes) override {
    return AllocWith("cudaMallocManaged", device, bytes, [](void** p, size_t n) {
      return cudaMallocManaged(p, n, cudaMemAttachGlobal);
    });
  }

  void Free(int device, void* p) override {
    if (p == nullptr) return;
    ScopedDevice scope;
    if (!scope.Enter(device).ok()) return;
    if (cudaFree(p) != cudaSuccess) cudaGetLastError();
  }

  absl::StatusOr<void*> HostAllocPinned(size_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("HostAllocPinned: bytes must be > 0, got 0");
    if (absl::Status s = internal::CheckDevice(0); !s.ok()) return s;
    void* p = nullptr;
    if (absl::Status s = CudaStatus(cudaHostAlloc(&p, bytes, cudaHostAllocPortable),
                                    absl::StrCat("cudaHostAlloc(bytes=", bytes, ")"));
        !s.ok()) {
      return s;
    }
    return p;
  }

  void HostFreePinned(void* p) override {
    if (p != nullptr && cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
  }

  absl::Status HostRegister(void* p, size_t n) override {
    if (p == nullptr || n == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "HostRegister: needs a non-null pointer and n > 0, got ", Addr(p), " n=", n));
    }
    if (absl::Status s = internal::CheckDevice(0); !s.ok()) return s;
    return CudaStatus(cudaHostRegister(p, n, cudaHostRegisterPortable),
                      absl::StrCat("cudaHostRegister(", Addr(p), ", ", n, ")"));
  }

  absl::Status HostUnregister(void* p) override {
    if (absl::Status s = internal::CheckDevice(0); !s.ok()) return s;
    return CudaStatus(cudaHostUnregister(p), absl::StrCat("cudaHostUnregister(", Addr(p), ")"));
  }

  // The driver's answer (driver_api.h), not cudaPointerGetAttributes: that would create a
  // context on the thread's current device and initialize CUDA in a process that may have
  // no device memory at all.
  PointerInfo Classify(const void* p) override { return internal::ClassifyWithDriver(p); }

  absl::Status Copy(int device, void* dst, const void* src, size_t n, CopyKind kind) override {
    const char* op = kind == CopyKind::kHostToDevice   ? "CopyHostToDevice"
                     : kind == CopyKind::kDeviceToHost ? "CopyDeviceToHost"
                                                       : "Copy";
    if (absl::Status s = CheckPointer(op, "dst", dst, n); !s.ok()) return s;
    if (absl::Status s = CheckPointer(op, "src", src, n); !s.ok()) return s;
    if (n == 0) return absl::OkStatus();
    ScopedDevice scope;
    if (absl::Status s = scope.Enter(device); !s.ok()) return s;
    const cudaMemcpyKind cuda_kind = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                                     : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                                       : cudaMemcpyDefault;
    if (absl::Status s = CudaStatus(cudaMemcpy(dst, src, n, cuda_kind),
                                    absl::StrCat(op, "(device=", device, ", n=", n, ")"));
        !s.ok()) {
      return s;
    }
    return WaitForDefaultStream(op, device);
  }

  absl::Status Memset(int device, void* p, int value, size_t n) override {
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

  absl::StatusOr<void*> CreateStream(int device) override {
    ScopedDevice scope;
    if (absl::Status s = scope.Enter(device); !s.ok()) return s;
    cudaStream_t stream = nullptr;
    if (absl::Status s = CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                    absl::StrCat("cudaStreamCreate(device=", device, ")"));
        !s.ok()) {
      return s;
    }
    return static_cast<void*>(stream);
  }

  void DestroyStream(void* stream) override {
    if (stream == nullptr) return;
    ScopedDevice scope;
    // An ignored failure must not stay in the thread's last-error slot for a later reader.
    if (EnterStreamDevice(scope, stream, "DestroyStream").ok() &&
        cudaStreamDestroy(static_cast<cudaStream_t>(stream)) != cudaSuccess) {
      (void)cudaGetLastError();
    }
  }

  absl::Status SynchronizeStream(void* stream) override {
    return CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
                      "cudaStreamSynchronize");
  }

  absl::Status BatchCopyAsync(void* stream, const CopyRegion* regions, int n) override {
    return CopyRegions("BatchCopyAsync", stream, regions, n);
  }

  absl::Status LaunchHostFunc(void* stream, std::function<void()> fn) override {
    if (!fn) return absl::InvalidArgumentError("LaunchHostFunc: fn is empty");
    auto* owned = new std::function<void()>(std::move(fn));
    absl::Status s =
        CudaStatus(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), &RunHostFunc, owned),
                   "cudaLaunchHostFunc");
    if (!s.ok()) delete owned;
    return s;
  }

  absl::StatusOr<void*> CreateEvent(int device) override {
    ScopedDevice scope;
    if (absl::Status s = scope.Enter(device); !s.ok()) return s;
    cudaEvent_t event = nullptr;
    if (absl::Status s = CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                                    absl::StrCat("cudaEventCreate(device=", device, ")"));
        !s.ok()) {
      return s;
    }
    return static_cast<void*>(event);
  }

  void DestroyEvent(void* event) override {
    if (event != nullptr && cudaEventDestroy(static_cast<cudaEvent_t>(event)) != cudaSuccess) {
      (void)cudaGetLastError();  // ignored: not left in the slot for a later reader
    }
  }

  absl::Status RecordEvent(void* event, void* stream) override {
    return CudaStatus(
        cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
        "cudaEventRecord");
  }

  absl::StatusOr<bool> EventDone(void* event) override {
    const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      // Not an error, but CUDA leaves it in the thread's last-error slot, where the next launch
      // check on this thread (ours, or the engine's own) would take it for a failure.
      (void)cudaGetLastError();
      return false;
    }
    if (absl::Status s = CudaStatus(err, "cudaEventQuery"); !s.ok()) return s;
    return true;
  }

  absl::Status WaitEvent(void* event) override {
    return CudaStatus(cudaEventSynchronize(static_cast<cudaEvent_t>(event)),
                      "cudaEventSynchronize");
  }

  absl::Status StreamWaitEvent(void* stream, void* event) override {
    return CudaStatus(
        cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
        "cudaStreamWaitEvent");
  }

  absl::StatusOr<std::string> ExportIpc(const void* p) override;
  absl::StatusOr<void*> OpenIpc(int device, absl::string_view blob) override;
  absl::Status CloseIpc(void* mapped) override;

  absl::StatusOr<DeviceUuid> DeviceUuidOf(int device) override {
    if (absl::Status s = internal::CheckDevice(device); !s.ok()) return s;
    cudaDeviceProp prop{};
    if (absl::Status s = CudaStatus(cudaGetDeviceProperties(&prop, device),
                                    absl::StrCat("cudaGetDeviceProperties(", device, ")"));
        !s.ok()) {
      return s;
    }
    DeviceUuid uuid;
    std::memcpy(uuid.data(), prop.uuid.bytes, uuid.size());
    return uuid;
  }

 private:
  template <typename F>
  absl::StatusOr<void*> AllocWith(const char* what, int device, size_t bytes, F alloc) {
    if (bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceAlloc(device=", device, "): bytes must be > 0, got 0"));
    }
    ScopedDevice scope;
    if (absl::Status s = scope.Enter(device); !s.ok()) return s;
    void* p = nullptr;
    if (absl::Status s = CudaStatus(alloc(&p, bytes),
                                    absl::StrCat(what, "(device=", device, ", bytes=", bytes, ")"));
        !s.ok()) {
      return s;
    }
    return p;
  }

  // One cudaMemcpyAsync (cudaMemcpyDefault) per region on the copy engine. cudaMemcpyBatchAsync
  // would take one call; it is left for when the device check (bench/gpu_check.sh) measures it.
  absl::Status CopyRegions(const char* op, void* stream, const CopyRegion* regions, int n) {
    if (absl::Status s = internal::ValidateRegions(regions, n); !s.ok()) return s;
    ScopedDevice scope;
    if (absl::Status s = EnterStreamDevice(scope, stream, op); !s.ok()) return s;
    for (int i = 0; i < n; ++i) {
      if (regions[i].bytes == 0) continue;
      if (absl::Status s =
              CudaStatus(cudaMemcpyAsync(regions[i].dst, regions[i].src, regions[i].bytes,
                                         cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
                         absl::StrCat(op, ": cudaMemcpyAsync of regions[", i, "] (",
                                      regions[i].bytes, " bytes)"));
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

  // An OpenIpc pointer (what the caller got): the base cudaIpcOpenMemHandle returned and the
  // opens not yet closed. A handle opened again in this process maps to the same base (CUDA
  // counts the opens and unmaps at the last close), so one entry serves every open of it.
  struct Opened {
    void* base = nullptr;
    int count = 0;
  };
  common::Mutex mu_;
  std::map<uintptr_t, Opened> opened_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::string> CudaRuntime::ExportIpc(const void* p) {
  const PointerInfo info = Classify(p);
  if (info.kind != MemoryKind::kDevice) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ExportIpc: ", Addr(p), " is ", MemoryKindName(info.kind), " memory, not device memory"));
  }
  ScopedDevice scope;
  if (absl::Status s = scope.Enter(info.device); !s.ok()) return s;
  uintptr_t base = 0;
  size_t size = 0;
  if (absl::Status s = AllocationRange(p, &base, &size); !s.ok()) return s;
  IpcWire wire{};
  std::memcpy(wire.magic, kIpcMagic, sizeof(kIpcMagic));
  if (absl::Status s = CudaStatus(cudaIpcGetMemHandle(&wire.handle, reinterpret_cast<void*>(base)),
                                  absl::StrCat("cudaIpcGetMemHandle(", Addr(p), ")"));
      !s.ok()) {
    return s;
  }
  wire.offset = reinterpret_cast<uintptr_t>(p) - base;
  wire.size = size;
  wire.device = info.device;
  absl::StatusOr<DeviceUuid> uuid = DeviceUuidOf(info.device);
  if (!uuid.ok()) return uuid.status();
  std::memcpy(wire.uuid, uuid->data(), sizeof(wire.uuid));
  return std::string(reinterpret_cast<const char*>(&wire), sizeof(wire));
}

absl::StatusOr<void*> CudaRuntime::OpenIpc(int device, absl::string_view blob) {
  IpcWire wire;
  if (blob.size() != sizeof(wire)) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA IPC handle must be ", sizeof(wire), " bytes, got ", blob.size()));
  }
  std::memcpy(&wire, blob.data(), sizeof(wire));
  if (std::memcmp(wire.magic, kIpcMagic, sizeof(kIpcMagic)) != 0) {
    return absl::InvalidArgumentError(
        "CUDA IPC handle has the wrong magic (not made by the cuda backend's ExportIpc)");
  }
  ScopedDevice scope;
  if (absl::Status s = scope.Enter(device); !s.ok()) return s;
  void* base = nullptr;
  if (absl::Status s =
          CudaStatus(cudaIpcOpenMemHandle(&base, wire.handle, cudaIpcMemLazyEnablePeerAccess),
                     absl::StrCat("cudaIpcOpenMemHandle(device=", device, ")"));
      !s.ok()) {
    return s;
  }
  void* mapped = static_cast<unsigned char*>(base) + wire.offset;
  common::MutexLock lock(&mu_);
  Opened& opened = opened_[reinterpret_cast<uintptr_t>(mapped)];
  opened.base = base;
  ++opened.count;
  return mapped;
}

absl::Status CudaRuntime::CloseIpc(void* mapped) {
  void* base = nullptr;
  {
    common::MutexLock lock(&mu_);
    auto it = opened_.find(reinterpret_cast<uintptr_t>(mapped));
    if (it == opened_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CloseIpc: ", Addr(mapped), " is not a pointer OpenIpc returned"));
    }
    base = it->second.base;
    if (--it->second.count == 0) opened_.erase(it);
  }
  // One close per open: CUDA unmaps at the last one.
  return CudaStatus(cudaIpcCloseMemHandle(base), "cudaIpcCloseMemHandle");
}

class CudaBackendImpl final : public DeviceBackend {
 public:
  DeviceRuntime& runtime() override { return runtime_; }
  KvKernels& kernels() override { return internal::CudaKernels(); }

 private:
  CudaRuntime runtime_;
};

}  // namespace

DeviceBackend* CudaBackend() {
  // Leaked on purpose: handles may be in use while other statics are destroyed.
  static DeviceBackend* const backend = new CudaBackendImpl();
  return backend;
}

}  // namespace granary::device
