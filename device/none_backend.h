#pragma once

// Private to device/: the `none` device backend (device_backend.h), whose every fallible call fails
// with one reason.

#include <memory>

#include "absl/status/status.h"
#include "device/device_backend.h"

namespace granary::device::internal {

// A none backend: every fallible call of its runtime and kernels returns `reason` (not OK),
// Classify says host, DeviceCount() is 0. Stateless, so thread-safe.
std::unique_ptr<DeviceBackend> MakeNoneBackend(absl::Status reason);

}  // namespace granary::device::internal
