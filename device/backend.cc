// Choosing the active device backend (device_backend.h).

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/mutex.h"
#include "device/cuda_probe.h"
#include "device/device.h"
#include "device/device_backend.h"
#include "device/driver_api.h"
#include "device/none_backend.h"

namespace granary::device {
namespace {

// The none backend for a refused GRANARY_DEVICE_BACKEND value, failing with `reason`, one per
// value, kept for the process (a handful at most: the environment is read once, tests ask for a
// few more).
DeviceBackend& RefusedBackend(const std::string& value, const absl::Status& reason) {
  static common::Mutex mu;
  static auto* const refused = new std::map<std::string, std::unique_ptr<DeviceBackend>>();
  common::MutexLock lock(&mu);
  std::unique_ptr<DeviceBackend>& backend = (*refused)[value];
  if (backend == nullptr) backend = internal::MakeNoneBackend(reason);
  return *backend;
}

// What the fake's library registered (RegisterFakeBackend); null in a binary without it.
// Constant-initialized, so registering from another file's static initializer is safe.
std::atomic<internal::FakeBackendFactory> g_process_fake{nullptr};

// Why GRANARY_DEVICE_BACKEND=fake fails in a binary without the fake.
constexpr char kNoFake[] =
    "the fake device backend (test code) is not built into this binary: configure with "
    "-DGRANARY_DEVICE_FAKE=ON (scripts/test.sh does) for a granary_node, Python module and "
    "granary_gpu_check that carry it, or link a test program with granary::device_fake";

std::atomic<DeviceBackend*> g_testing_backend{nullptr};

DeviceBackend& ChosenFromEnvironment() {
  static DeviceBackend* const chosen = [] {
    std::string detail;
    const char* asked = std::getenv("GRANARY_DEVICE_BACKEND");
    DeviceBackend* backend = &internal::ChooseBackend(asked, &detail);
    if (absl::StartsWith(detail, "refused")) {
      GRANARY_LOG_ERROR << "device backend: " << detail;
    } else if (backend->runtime().Name() == "fake") {
      GRANARY_LOG_WARN << "device backend: " << detail << " (not a GPU: CPU-only test memory)";
    } else if (asked != nullptr && *asked != '\0') {
      GRANARY_LOG_INFO << "device backend: " << detail;
    } else {
      // Chosen without being asked: this runs inside users' programs (the client library, the
      // Python module), which should not print it; the node logs its GPU segments itself.
      GRANARY_LOG_DEBUG << "device backend: " << detail;
    }
    return backend;
  }();
  return *chosen;
}

}  // namespace

absl::string_view MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kPinnedHost:
      return "pinned_host";
    case MemoryKind::kDevice:
      return "device";
    case MemoryKind::kManaged:
      return "managed";
  }
  return "unknown";
}

DeviceBackend& NoneBackend() {
  static DeviceBackend* const none =
      internal::MakeNoneBackend([] {
        absl::Status reason = internal::CudaUnavailableReason();
        return reason.ok() ? absl::FailedPreconditionError("the none device backend was chosen")
                           : reason;
      }())
          .release();
  return *none;
}

namespace internal {

DeviceBackend& ChooseBackend(const char* env_value, std::string* detail) {
  const std::string value = env_value == nullptr ? "" : env_value;
  if (value == "fake") {
    if (FakeBackendFactory process_fake = g_process_fake.load(std::memory_order_acquire)) {
      *detail = "fake (GRANARY_DEVICE_BACKEND=fake)";
      return process_fake();
    }
    *detail = absl::StrCat("refused GRANARY_DEVICE_BACKEND='fake': ", kNoFake,
                           "; every device call fails until it is fixed");
    return RefusedBackend(value, absl::FailedPreconditionError(
                                     absl::StrCat("GRANARY_DEVICE_BACKEND='fake': ", kNoFake)));
  }
  if (value == "none") {
    *detail = "none (GRANARY_DEVICE_BACKEND=none)";
    return NoneBackend();
  }
  if (!value.empty() && value != "cuda") {
    *detail = absl::StrCat("refused GRANARY_DEVICE_BACKEND='", value,
                           "' (use cuda, fake or none): every device call fails until it is fixed");
    return RefusedBackend(
        value, absl::InvalidArgumentError(absl::StrCat("GRANARY_DEVICE_BACKEND='", value,
                                                       "' is not one of cuda, fake, none")));
  }
  // Neither the choice nor Classify initializes CUDA (no cuInit, no runtime call, no context):
  // a process that never sees device memory never does, so a child it forks can still use CUDA.
  // The devices are counted at the first call that needs one; without any, such calls fail
  // FAILED_PRECONDITION saying so, as the none backend's do.
  DeviceBackend* cuda = CudaBackend();
  if (cuda != nullptr && internal::DriverPresent()) {
    *detail = value.empty() ? "cuda (the default: built with CUDA and the driver is installed)"
                            : "cuda (GRANARY_DEVICE_BACKEND=cuda)";
    return *cuda;
  }
  *detail =
      absl::StrCat("none (", value.empty() ? "the default" : "GRANARY_DEVICE_BACKEND=cuda, but",
                   ": ", internal::CudaUnavailableReason().message(), ")");
  return NoneBackend();
}

void RegisterFakeBackend(FakeBackendFactory process_fake) {
  g_process_fake.store(process_fake, std::memory_order_release);
}

}  // namespace internal

DeviceBackend& ActiveBackend() {
  if (DeviceBackend* testing = g_testing_backend.load(std::memory_order_acquire)) return *testing;
  return ChosenFromEnvironment();
}

DeviceRuntime& ActiveRuntime() { return ActiveBackend().runtime(); }

KvKernels& ActiveKernels() { return ActiveBackend().kernels(); }

absl::string_view ActiveBackendName() { return ActiveRuntime().Name(); }

DeviceBackend* SetBackendForTesting(DeviceBackend* backend) {
  return g_testing_backend.exchange(backend, std::memory_order_acq_rel);
}

}  // namespace granary::device
