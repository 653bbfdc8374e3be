#pragma once

// One put's wait for the engine (granary::DeviceWait, the stream contract in
// include/granary/client.h): made when the call starts, then handed to the paths that read the
// caller's memory. A path that copies on a stream of its own calls Before(stream), which makes
// that stream wait on the device (StreamWaitEvent: no host wait); one that reads on the host
// (the CPU, UCX) or copies synchronously calls OnHost. Once the host has waited, both are no-ops.
//
// Owned by the call that made it and used by its thread only (not thread-safe). Costs, per put
// with a DeviceWait: for a stream, one event created, recorded and destroyed; per stream that
// waits, one StreamWaitEvent.

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device_backend.h"
#include "granary/client.h"

namespace granary::client {

class EngineOrder {
 public:
  // For `wait` (non-empty) on the active device backend. `device`: the device of the call's
  // device memory, -1 when it has none. With wait.stream and a device, an event is recorded on
  // the stream now; where that fails (a stream of another device) or there is no device, the
  // stream is synchronized on the host at the first wait instead. Never fails today; a handle
  // the backend refuses fails the waits (with the backend's code, the handle named).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EngineOrder>> Create(const DeviceWait& wait,
                                                                           int device);
  ~EngineOrder();
  EngineOrder(const EngineOrder&) = delete;
  EngineOrder& operator=(const EngineOrder&) = delete;

  // Work enqueued on `stream` (a stream of the active backend) after this call runs only once
  // the engine's work is done. stream == nullptr: OnHost.
  [[nodiscard]] absl::Status Before(void* stream);
  // Blocks until the engine's work is done.
  [[nodiscard]] absl::Status OnHost();

 private:
  explicit EngineOrder(device::DeviceRuntime* backend) : backend_(backend) {}
  [[nodiscard]] absl::Status Named(const absl::Status& st, const char* what) const;

  device::DeviceRuntime* const backend_;
  void* caller_event_ = nullptr;  // DeviceWait::event
  void* own_event_ = nullptr;     // recorded on DeviceWait::stream at Create
  void* sync_stream_ = nullptr;   // DeviceWait::stream, synchronized on the host instead
  bool done_ = false;             // the host has waited: nothing is left to wait for
};

}  // namespace granary::client
