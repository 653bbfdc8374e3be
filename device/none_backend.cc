// The `none` device backend (none_backend.h).

#include "device/none_backend.h"

#include <string>
#include <utility>

namespace granary::device::internal {
namespace {

class NoneRuntime final : public DeviceRuntime {
 public:
  explicit NoneRuntime(absl::Status reason) : reason_(std::move(reason)) {}

  absl::string_view Name() const override { return "none"; }
  int DeviceCount() override { return 0; }
  absl::StatusOr<void*> Alloc(int, size_t) override { return reason_; }
  absl::StatusOr<void*> AllocManaged(int, size_t) override { return reason_; }
  void Free(int, void*) override {}
  absl::StatusOr<void*> HostAllocPinned(size_t) override { return reason_; }
  void HostFreePinned(void*) override {}
  absl::Status HostRegister(void*, size_t) override { return reason_; }
  absl::Status HostUnregister(void*) override { return reason_; }
  PointerInfo Classify(const void*) override { return {}; }
  absl::Status Copy(int, void*, const void*, size_t, CopyKind) override { return reason_; }
  absl::Status Memset(int, void*, int, size_t) override { return reason_; }
  absl::StatusOr<void*> CreateStream(int) override { return reason_; }
  void DestroyStream(void*) override {}
  absl::Status SynchronizeStream(void*) override { return reason_; }
  absl::Status BatchCopyAsync(void*, const CopyRegion*, int) override { return reason_; }
  absl::Status LaunchHostFunc(void*, std::function<void()>) override { return reason_; }
  absl::StatusOr<void*> CreateEvent(int) override { return reason_; }
  void DestroyEvent(void*) override {}
  absl::Status RecordEvent(void*, void*) override { return reason_; }
  absl::StatusOr<bool> EventDone(void*) override { return reason_; }
  absl::Status WaitEvent(void*) override { return reason_; }
  absl::Status StreamWaitEvent(void*, void*) override { return reason_; }
  absl::StatusOr<std::string> ExportIpc(const void*) override { return reason_; }
  absl::StatusOr<void*> OpenIpc(int, absl::string_view) override { return reason_; }
  absl::Status CloseIpc(void*) override { return reason_; }
  absl::StatusOr<DeviceUuid> DeviceUuidOf(int) override { return reason_; }

 private:
  const absl::Status reason_;
};

class NoneKernels final : public KvKernels {
 public:
  explicit NoneKernels(absl::Status reason) : reason_(std::move(reason)) {}

  absl::Status GatherBlocks(int, const PagedKvLayout&, const void*, const void*, const int32_t*,
                            int, void*, void*) override {
    return reason_;
  }
  absl::Status ScatterBlocks(int, const PagedKvLayout&, const void*, const int32_t*, int, void*,
                             void*, void*) override {
    return reason_;
  }
  absl::Status BatchCopy(int, const CopyRegion*, int, void*) override { return reason_; }
  absl::Status BatchChecksum(int, const ChecksumRegion*, int, uint64_t*, void*) override {
    return reason_;
  }
  absl::Status CompareExchange64(int, const CasOp64*, int) override { return reason_; }

 private:
  const absl::Status reason_;
};

class NoneBackendImpl final : public DeviceBackend {
 public:
  explicit NoneBackendImpl(const absl::Status& reason) : runtime_(reason), kernels_(reason) {}

  DeviceRuntime& runtime() override { return runtime_; }
  KvKernels& kernels() override { return kernels_; }

 private:
  NoneRuntime runtime_;
  NoneKernels kernels_;
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeNoneBackend(absl::Status reason) {
  return std::make_unique<NoneBackendImpl>(reason);
}

}  // namespace granary::device::internal
