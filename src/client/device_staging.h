#pragma once

// The staging helpers the scatter-list calls (client_regions.cc) and the paged-KV calls
// (paged_kv.cc, include/granary/paged_kv.h) share: a staging allocation taken from a
// StagingPool (device memory) or made in host memory, and synchronous copies and batched-copy
// launches on a pooled non-blocking stream of the buffer's device (client/stream_pool.h), never
// the legacy default stream, which would wait for the engine's queued work on blocking
// streams, make its later work wait, break an engine capturing a CUDA graph, and run on the
// calling thread's current device.
//
// Scratch is one call's (not thread-safe); the functions are reentrant, their pools
// thread-safe.

#include <cstddef>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "client/staging_pool.h"
#include "client/stream_pool.h"
#include "device/device_backend.h"

namespace granary::client {

// One staging allocation: device memory from a StagingPool, given back on destruction, or host
// memory.
class Scratch {
 public:
  explicit Scratch(StagingPool* pool) : pool_(pool) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
  // `bytes` of host memory (device < 0) or of `device`'s memory; nothing for 0 bytes. The
  // pool's error (naming the size and the device) when it cannot allocate.
  [[nodiscard]] absl::Status Allocate(int device, size_t bytes);
  unsigned char* data() const { return data_; }

 private:
  StagingPool* const pool_;
  StagingPool::Buffer device_;  // data == nullptr: none taken
  unsigned char* data_ = nullptr;
  std::vector<unsigned char> host_;
};

// Runs `enqueue` on a stream of `device` from `streams` and waits for it; the stream goes back
// to the pool, or is destroyed when the work failed.
[[nodiscard]] absl::Status OnStream(
    StreamPool* streams, int device,
    absl::FunctionRef<absl::Status(device::DeviceBackend&, void*)> enqueue);

// Copies the regions: memcpy when both sides are host memory (device < 0), else on the
// backend's copy engine (the direction from the pointers), complete on return. INTERNAL naming
// the device when a device copy fails.
[[nodiscard]] absl::Status CopyAll(StreamPool* streams, int device,
                                   const std::vector<device::CopyRegion>& regions);

// Runs the regions as one batched-copy kernel launch on `device` (BatchCopyCpu for host
// memory, device < 0), complete on return.
[[nodiscard]] absl::Status RunCopyKernel(StreamPool* streams, int device,
                                         const std::vector<device::CopyRegion>& regions);

}  // namespace granary::client
