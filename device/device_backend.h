#pragma once

// A device backend: the one way every device operation of Granary goes (docs/architecture.md
// section 7). It has two narrow halves, as NIXL keeps its transfer backends narrow: the runtime
// (device_runtime.h: memory, streams, events, IPC) and Granary's kernels over that runtime's
// memory and streams (kv_kernels.h: gather and scatter, batched copy, checksum, CAS). Three
// implementations:
//   cuda  the CUDA runtime and kernels (only in a build with GRANARY_HAVE_CUDA);
//   none  nothing usable: every fallible call FAILED_PRECONDITION with the reason (kNoCudaMessage
//         in a build without CUDA), Classify says host;
//   fake  CPU-only "device memory" the CPU cannot touch, asynchronous streams on threads, IPC
//         between processes, and fault injection (device/fake/fake_backend.h), for machines
//         without a GPU. Test code in a library of its own (granary::device_fake), present only in
//         the binaries that link it; chosen only explicitly.
// The free functions of device.h and the GPU calls of kv_layout.h are a facade over the active
// backend (ActiveRuntime(), ActiveKernels()).
//
// Thread safety: runtime() and kernels() may be called from any thread, and so may every method
// of both halves. Backends live for the whole process (see ActiveBackend), except fakes made by
// tests.

#include <string>

#include "absl/strings/string_view.h"
#include "device/device_runtime.h"
#include "device/kv_kernels.h"

namespace granary::device {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // The two halves; each lives as long as the backend.
  virtual DeviceRuntime& runtime() = 0;
  virtual KvKernels& kernels() = 0;
};

// The backend the facade uses. Chosen once per process, at first use, from
// GRANARY_DEVICE_BACKEND:
//   unset or empty  cuda when built with CUDA and the NVIDIA driver library loads, else none
//                   (never fake);
//   cuda            the CUDA runtime; none with the reason when it is not built in or the
//                   driver is absent;
//   fake            a fake with FakeOptions' defaults, where this binary links the fake
//                   (internal::RegisterFakeBackend); where it does not, refused as below but
//                   FAILED_PRECONDITION, the message naming the value and the build option
//                   (GRANARY_DEVICE_FAKE) that links it in;
//   none            none;
//   anything else   refused: a none backend whose every call returns INVALID_ARGUMENT naming
//                   the value, logged at error (a typo must not silently run without a GPU).
// The choice initializes nothing (no cuInit, no context; device/driver_api.h): cuda counts its
// devices at the first call that needs one, and its calls fail FAILED_PRECONDITION when there
// is none. The choice is logged once at info. Never null; lives for the process.
DeviceBackend& ActiveBackend();

// ActiveBackend().runtime() and ActiveBackend().kernels(): both halves of the same backend,
// unless SetBackendForTesting swaps it between the two calls.
DeviceRuntime& ActiveRuntime();
KvKernels& ActiveKernels();

// ActiveRuntime().Name(), for the /metrics gauge.
absl::string_view ActiveBackendName();

// Replaces the active backend (nullptr: back to the one chosen from the environment) and returns
// the previous replacement (nullptr when there was none). The caller keeps `backend` alive while it
// is active and while any handle it made is in use. Not for production: handles made by the old
// backend must not outlive it.
DeviceBackend* SetBackendForTesting(DeviceBackend* backend);

// The process-wide instances. CudaBackend() is nullptr in a build without CUDA.
DeviceBackend* CudaBackend();
DeviceBackend& NoneBackend();

namespace internal {
// The choice ActiveBackend makes for an environment value (nullptr: unset), without logging or
// caching; the fake it may return is process-wide too. `detail` gets a line for the log.
DeviceBackend& ChooseBackend(const char* env_value, std::string* detail);

// Makes GRANARY_DEVICE_BACKEND=fake choose `process_fake()` (a process-wide fake that lives for
// the process). Called once, before main, by the fake's library (device/fake/fake_backend.cc) in
// every binary that links it; nothing else calls it.
using FakeBackendFactory = DeviceBackend& (*)();
void RegisterFakeBackend(FakeBackendFactory process_fake);
}  // namespace internal

}  // namespace granary::device
