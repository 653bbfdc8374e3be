#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "device/device_backend.h"

namespace granary::node {

// Device memory for a GPU segment (granary_node --gpu_segment_size, --gpu_device): one
// allocation through the device backend, zeroed (no stale bytes can pass for an allocation
// header), exported once for same-host IPC, with its device's UUID. The CPU never touches it:
// its allocation headers are read and written by device copies only (clients copy them to host
// memory and check them there), and it is never handed to UCX. Owns the allocation (freed on
// destruction, through the backend that made it). Immutable after Create; thread-safe to read.
class GpuSegment {
 public:
  // `flag_size` is how the operator wrote the size (for messages). FAILED_PRECONDITION naming
  // --gpu_segment_size and --gpu_device when the backend has no GPU support (none: a build
  // without CUDA, or GRANARY_DEVICE_BACKEND=none), no device, or not this device; the
  // allocation's own error (RESOURCE_EXHAUSTED when the device is full) otherwise.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<GpuSegment>> Create(
      device::DeviceRuntime* backend, int device, uint64_t size, const std::string& flag_size);
  ~GpuSegment();
  GpuSegment(const GpuSegment&) = delete;
  GpuSegment& operator=(const GpuSegment&) = delete;

  void* base() const { return base_; }
  uint64_t size() const { return size_; }
  int device() const { return device_; }
  const std::string& ipc() const { return ipc_; }  // DeviceRuntime::ExportIpc(base)
  const device::DeviceUuid& uuid() const { return uuid_; }

 private:
  GpuSegment() = default;
  device::DeviceRuntime* backend_ = nullptr;
  int device_ = -1;
  void* base_ = nullptr;
  uint64_t size_ = 0;
  std::string ipc_;
  device::DeviceUuid uuid_{};
};

}  // namespace granary::node
