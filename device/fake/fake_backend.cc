// The fake device backend (fake_backend.h): its runtime (fake_runtime.h) and kernels
// (fake_kernels.h) under one FakeBackend, whose knobs go to the runtime; and the process-wide
// fake that GRANARY_DEVICE_BACKEND=fake chooses, registered before main in every binary that
// links this library.

#include "device/fake/fake_backend.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "device/fake/fake_kernels.h"
#include "device/fake/fake_runtime.h"

namespace granary::device {
namespace {

class FakeBackendImpl final : public FakeBackend {
 public:
  explicit FakeBackendImpl(const FakeOptions& options) : runtime_(options), kernels_(&runtime_) {}

  DeviceRuntime& runtime() override { return runtime_; }
  KvKernels& kernels() override { return kernels_; }

  int ContextsCreated(int device) override { return runtime_.ContextsCreated(device); }
  void SetHostRegisterDelay(absl::Duration delay) override { runtime_.SetHostRegisterDelay(delay); }
  uint64_t DefaultStreamOps() override { return runtime_.DefaultStreamOps(); }
  uint64_t SynchronousCopies() override { return runtime_.SynchronousCopies(); }
  void FailNthAllocation(int n) override { runtime_.FailNthAllocation(n); }
  void InjectStickyCopyError() override { runtime_.InjectStickyCopyError(); }
  void FailNextIpcOpen() override { runtime_.FailNextIpcOpen(); }
  absl::StatusOr<void*> CreateEngineStream(int device, absl::Duration hold) override {
    return runtime_.CreateEngineStream(device, hold);
  }
  void SetOpDelay(absl::Duration delay) override { runtime_.SetOpDelay(delay); }
  void SetStrictPinned(bool strict) override { runtime_.SetStrictPinned(strict); }

 private:
  internal::FakeRuntime runtime_;
  internal::FakeKernels kernels_;  // after runtime_, which it uses
};

DeviceBackend& ProcessFake() {
  // Leaked on purpose: handles may be in use while other statics are destroyed.
  static DeviceBackend* const fake = [] {
    absl::StatusOr<std::unique_ptr<FakeBackend>> made = FakeBackend::Create(FakeOptions{});
    GRANARY_CHECK(made.ok()) << made.status();
    return made->release();
  }();
  return *fake;
}

// The library is an OBJECT library (device/fake/CMakeLists.txt), so this file, and with it this
// initializer, is in every binary that links it, whether or not the binary names the fake.
[[maybe_unused]] const bool kRegistered = (internal::RegisterFakeBackend(&ProcessFake), true);

}  // namespace

absl::Status FakeBackend::PeekAtLastError() { return internal::PeekFakeLastError(); }

absl::StatusOr<std::unique_ptr<FakeBackend>> FakeBackend::Create(const FakeOptions& options) {
  if (options.device_count < 1 || options.device_count > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("FakeOptions.device_count must be in [1, 255], got ", options.device_count));
  }
  if (options.op_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("FakeOptions.op_delay must be >= 0, got ",
                                                   absl::FormatDuration(options.op_delay)));
  }
  return std::unique_ptr<FakeBackend>(std::make_unique<FakeBackendImpl>(options));
}

}  // namespace granary::device
