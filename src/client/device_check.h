#pragma once

// The classification of the buffers of RegisterBuffer, PutFrom, GetInto and their batch forms:
// host memory, device memory the device backend can copy (client/device_transfers.h), or device
// memory no path of this process can use (granary/device_pointer.h), which is refused: a refused
// buffer is never touched, and a refused key of a batch never reaches the master.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace granary::client {

// INVALID_ARGUMENT with ErrorReason::kDevicePointer, naming the address (hex) and the size.
absl::Status DevicePointerError(const void* p, size_t n);
// IsDevicePointer(p, n) as a status: OK for host memory, DevicePointerError otherwise.
absl::Status CheckHostMemory(const void* p, size_t n);
// Where a GetInto/PutFrom buffer lives: -1 for host memory (pageable or pinned); the device for
// device or managed memory the active device backend can copy (client/device_transfers.h);
// DevicePointerError for device memory no backend of this process can copy (the none backend, a
// test's fake range) and for a buffer whose first and last bytes are in different memory.
absl::StatusOr<int> BufferDevice(const void* p, size_t n);

// Runs `run(keys, buffers, sizes, devices)` on the keys whose buffer BufferDevice accepts and
// answers every other key with its refusal. devices is null when every buffer is host memory
// (the usual case: `run` gets the inputs themselves, no copy), else each run key's device or -1.
template <typename Result, typename Ptr, typename Run>
std::vector<Result> WithBufferDevices(absl::Span<const std::string> keys,
                                      absl::Span<const Ptr> buffers, absl::Span<const size_t> sizes,
                                      const Run& run) {
  const size_t n = keys.size();
  std::vector<absl::Status> refused;  // empty until a refused buffer is seen
  std::vector<int> devices;           // empty until a device buffer is seen
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<int> d = BufferDevice(buffers[i], sizes[i]);
    if (d.ok() && *d < 0) continue;
    if (d.ok()) {
      if (devices.empty()) devices.assign(n, -1);
      devices[i] = *d;
      continue;
    }
    if (refused.empty()) refused.resize(n);
    refused[i] = d.status();
  }
  if (refused.empty()) return run(keys, buffers, sizes, devices.empty() ? nullptr : &devices);
  std::vector<std::string> k;
  std::vector<Ptr> b;
  std::vector<size_t> s, index;
  std::vector<int> dev;
  for (size_t i = 0; i < n; ++i) {
    if (!refused[i].ok()) continue;
    k.push_back(keys[i]);
    b.push_back(buffers[i]);
    s.push_back(sizes[i]);
    dev.push_back(devices.empty() ? -1 : devices[i]);
    index.push_back(i);
  }
  std::vector<Result> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {  // the run keys' placeholders are replaced below
    out.emplace_back(refused[i].ok() ? absl::UnknownError("not attempted") : refused[i]);
  }
  if (!k.empty()) {
    std::vector<Result> ran = run(k, b, s, devices.empty() ? nullptr : &dev);
    for (size_t j = 0; j < index.size() && j < ran.size(); ++j) out[index[j]] = std::move(ran[j]);
  }
  return out;
}

}  // namespace granary::client
