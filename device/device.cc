// device.h and the GPU half of kv_layout.h as a thin facade over the active backend
// (device_backend.h). Cost per call: one atomic load and one virtual call on top of the backend.

#include "device/device.h"

#include <utility>

#include "device/device_backend.h"
#include "device/kv_layout.h"

namespace granary::device {
int DeviceCount() { return ActiveRuntime().DeviceCount(); }

bool Available() { return DeviceCount() > 0; }

absl::StatusOr<void*> DeviceAlloc(int device, size_t bytes) {
  return ActiveRuntime().Alloc(device, bytes);
}

void DeviceFree(int device, void* p) { ActiveRuntime().Free(device, p); }

absl::Status CopyHostToDevice(int device, void* dst, const void* src, size_t n) {
  return ActiveRuntime().Copy(device, dst, src, n, CopyKind::kHostToDevice);
}

absl::Status CopyDeviceToHost(int device, void* dst, const void* src, size_t n) {
  return ActiveRuntime().Copy(device, dst, src, n, CopyKind::kDeviceToHost);
}

absl::Status Memset(int device, void* p, int value, size_t n) {
  return ActiveRuntime().Memset(device, p, value, n);
}

bool IsDevicePointer(const void* p) {
  if (p == nullptr) return false;
  const MemoryKind kind = ActiveRuntime().Classify(p).kind;
  return kind == MemoryKind::kDevice || kind == MemoryKind::kManaged;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(int device, size_t bytes) {
  DeviceRuntime* runtime = &ActiveRuntime();
  absl::StatusOr<void*> p = runtime->Alloc(device, bytes);
  if (!p.ok()) return p.status();
  return DeviceBuffer(runtime, device, *p, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : runtime_(std::exchange(other.runtime_, nullptr)),
      device_(std::exchange(other.device_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    runtime_ = std::exchange(other.runtime_, nullptr);
    device_ = std::exchange(other.device_, -1);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Reset(); }

void DeviceBuffer::Reset() {
  if (data_ != nullptr) runtime_->Free(device_, data_);
  runtime_ = nullptr;
  device_ = -1;
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<Stream> Stream::Create(int device) {
  DeviceRuntime* runtime = &ActiveRuntime();
  absl::StatusOr<void*> handle = runtime->CreateStream(device);
  if (!handle.ok()) return handle.status();
  return Stream(runtime, device, *handle);
}

Stream::Stream(Stream&& other) noexcept
    : runtime_(std::exchange(other.runtime_, nullptr)),
      device_(std::exchange(other.device_, -1)),
      handle_(std::exchange(other.handle_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    Reset();
    runtime_ = std::exchange(other.runtime_, nullptr);
    device_ = std::exchange(other.device_, -1);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Stream::~Stream() { Reset(); }

absl::Status Stream::Synchronize() const {
  if (handle_ == nullptr) return absl::FailedPreconditionError("Synchronize on an empty Stream");
  return runtime_->SynchronizeStream(handle_);
}

void Stream::Reset() {
  if (handle_ != nullptr) runtime_->DestroyStream(handle_);
  runtime_ = nullptr;
  device_ = -1;
  handle_ = nullptr;
}

absl::Status GatherBlocksGpu(int device, const PagedKvLayout& layout, const void* k_cache,
                             const void* v_cache, const int32_t* block_ids, int n, void* out,
                             void* stream) {
  return ActiveKernels().GatherBlocks(device, layout, k_cache, v_cache, block_ids, n, out, stream);
}

absl::Status ScatterBlocksGpu(int device, const PagedKvLayout& layout, const void* in,
                              const int32_t* block_ids, int n, void* k_cache, void* v_cache,
                              void* stream) {
  return ActiveKernels().ScatterBlocks(device, layout, in, block_ids, n, k_cache, v_cache, stream);
}

absl::Status BatchCopyGpu(int device, const CopyRegion* regions, int n, void* stream) {
  return ActiveKernels().BatchCopy(device, regions, n, stream);
}

}  // namespace granary::device
