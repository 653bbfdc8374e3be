#include "node/gpu_segment.h"

#include "absl/strings/str_cat.h"

namespace granary::node {

absl::StatusOr<std::unique_ptr<GpuSegment>> GpuSegment::Create(device::DeviceRuntime* backend,
                                                               int device, uint64_t size,
                                                               const std::string& flag_size) {
  const std::string what =
      absl::StrCat("--gpu_segment_size=", flag_size, " on --gpu_device=", device);
  if (backend->Name() == "none") {
    // Every call of the none backend answers with the reason it is none.
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": no CUDA toolkit or GPU support in this process (device backend none: ",
        backend->DeviceUuidOf(device).status().message(), ")"));
  }
  const int count = backend->DeviceCount();
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": no GPU device (the ", backend->Name(), " device backend sees none)"));
  }
  if (device >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--gpu_device=", device, ": no such device (the ", backend->Name(), " device backend has ",
        count, " device", count == 1 ? "" : "s", ": 0..", count - 1, ")"));
  }
  std::unique_ptr<GpuSegment> s(new GpuSegment());
  s->backend_ = backend;
  s->device_ = device;
  s->size_ = size;
  absl::StatusOr<void*> p = backend->Alloc(device, size);
  if (!p.ok()) {
    return absl::Status(p.status().code(),
                        absl::StrCat(what, ": allocation failed: ", p.status().message()));
  }
  s->base_ = *p;  // freed by the destructor from here on
  if (absl::Status st = backend->Memset(device, s->base_, 0, size); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat(what, ": zeroing failed: ", st.message()));
  }
  absl::StatusOr<std::string> ipc = backend->ExportIpc(s->base_);
  if (!ipc.ok()) {
    return absl::Status(ipc.status().code(),
                        absl::StrCat(what, ": IPC export failed: ", ipc.status().message()));
  }
  s->ipc_ = std::move(*ipc);
  absl::StatusOr<device::DeviceUuid> uuid = backend->DeviceUuidOf(device);
  if (!uuid.ok()) {
    return absl::Status(uuid.status().code(), absl::StrCat(what,
                                                           ": reading the device UUID "
                                                           "failed: ",
                                                           uuid.status().message()));
  }
  s->uuid_ = *uuid;
  return s;
}

GpuSegment::~GpuSegment() {
  if (base_ != nullptr) backend_->Free(device_, base_);
}

}  // namespace granary::node
