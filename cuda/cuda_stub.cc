// The CUDA-less build of device.h and the GPU half of kv_layout.h: nothing is available, and
// every fallible call says why. Compiled instead of cuda_runtime.cc, kv_layout_gpu.cc and
// kernels.cu when GRANARY_HAVE_CUDA is OFF.

#include "cuda/device.h"
#include "cuda/kv_layout.h"

namespace granary::cuda {
namespace {

absl::Status NoCuda() { return absl::FailedPreconditionError(kNoCudaMessage); }

}  // namespace

bool BuiltWithCuda() { return false; }
int DeviceCount() { return 0; }
bool Available() { return false; }

absl::StatusOr<void*> DeviceAlloc(int, size_t) { return NoCuda(); }
void DeviceFree(int, void*) {}
absl::Status CopyHostToDevice(int, void*, const void*, size_t) { return NoCuda(); }
absl::Status CopyDeviceToHost(int, void*, const void*, size_t) { return NoCuda(); }
absl::Status Memset(int, void*, int, size_t) { return NoCuda(); }
bool IsDevicePointer(const void*) { return false; }

absl::StatusOr<Stream> Stream::Create(int) { return NoCuda(); }
absl::Status Stream::Synchronize() const { return NoCuda(); }
void Stream::Reset() {
  device_ = -1;
  handle_ = nullptr;
}

absl::Status GatherBlocksGpu(int, const PagedKvLayout&, const void*, const void*, const int32_t*,
                             int, void*, void*) {
  return NoCuda();
}

absl::Status ScatterBlocksGpu(int, const PagedKvLayout&, const void*, const int32_t*, int, void*,
                              void*, void*) {
  return NoCuda();
}

absl::Status BatchCopyGpu(int, const CopyRegion*, int, void*) { return NoCuda(); }

}  // namespace granary::cuda
