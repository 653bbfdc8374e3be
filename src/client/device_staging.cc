#include "client/device_staging.h"

#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "device/kv_layout.h"

namespace granary::client {

Scratch::~Scratch() {
  if (device_.data != nullptr) pool_->Return(device_);
}

absl::Status Scratch::Allocate(int device, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  if (device < 0) {
    host_.resize(bytes);
    data_ = host_.data();
    return absl::OkStatus();
  }
  absl::StatusOr<StagingPool::Buffer> b = pool_->Take(&device::ActiveRuntime(), device, bytes);
  if (!b.ok()) return b.status();
  device_ = *b;
  data_ = device_.data;
  return absl::OkStatus();
}

absl::Status OnStream(StreamPool* streams, int device,
                      absl::FunctionRef<absl::Status(device::DeviceBackend&, void*)> enqueue) {
  device::DeviceBackend& b = device::ActiveBackend();
  absl::StatusOr<StreamPool::Stream> stream = streams->Take(&b.runtime(), device);
  if (!stream.ok()) return stream.status();
  absl::Status st = enqueue(b, stream->handle);
  absl::Status synced = b.runtime().SynchronizeStream(stream->handle);
  if (st.ok()) st = synced;
  streams->Return(*stream, st.ok());
  return st;
}

absl::Status CopyAll(StreamPool* streams, int device,
                     const std::vector<device::CopyRegion>& regions) {
  if (regions.empty()) return absl::OkStatus();
  if (device < 0) {
    for (const device::CopyRegion& r : regions) std::memcpy(r.dst, r.src, r.bytes);
    return absl::OkStatus();
  }
  absl::Status st = OnStream(streams, device, [&](device::DeviceBackend& b, void* stream) {
    return b.runtime().BatchCopyAsync(stream, regions.data(), static_cast<int>(regions.size()));
  });
  if (!st.ok()) {
    return absl::InternalError(
        absl::StrCat("a staging copy on device ", device, " failed: ", st.message()));
  }
  return absl::OkStatus();
}

absl::Status RunCopyKernel(StreamPool* streams, int device,
                           const std::vector<device::CopyRegion>& regions) {
  if (regions.empty()) return absl::OkStatus();
  const int n = static_cast<int>(regions.size());
  if (device < 0) return device::BatchCopyCpu(regions.data(), n);
  return OnStream(streams, device, [&](device::DeviceBackend& b, void* stream) {
    return b.kernels().BatchCopy(device, regions.data(), n, stream);
  });
}

}  // namespace granary::client
