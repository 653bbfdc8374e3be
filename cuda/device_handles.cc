// The moving parts of DeviceBuffer and Stream, the same in the CUDA and the stub build; the
// calls that touch CUDA live in cuda_runtime.cc or cuda_stub.cc.

#include <utility>

#include "cuda/device.h"

namespace granary::cuda {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(int device, size_t bytes) {
  absl::StatusOr<void*> p = DeviceAlloc(device, bytes);
  if (!p.ok()) return p.status();
  return DeviceBuffer(device, *p, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(std::exchange(other.device_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    device_ = std::exchange(other.device_, -1);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Reset(); }

void DeviceBuffer::Reset() {
  if (data_ != nullptr) DeviceFree(device_, data_);
  device_ = -1;
  data_ = nullptr;
  size_ = 0;
}

Stream::Stream(Stream&& other) noexcept
    : device_(std::exchange(other.device_, -1)), handle_(std::exchange(other.handle_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    Reset();
    device_ = std::exchange(other.device_, -1);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

Stream::~Stream() { Reset(); }

}  // namespace granary::cuda
