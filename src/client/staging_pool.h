#pragma once

// Device staging buffers kept for reuse by the scatter-list calls (client_regions.cc) and the
// paged-KV calls (paged_kv.cc), one pool each. A call takes a buffer of at least the bytes it needs
// and gives it back, so device memory is allocated once, not per call: a cudaFree per call would
// wait for the whole device (the engine's kernels included), and a cudaMalloc per call competes
// with the engine's caching allocator on a nearly full GPU. Sizes are rounded up to a power of two
// (at least kMinBytes), so a few buffers serve every batch size; with no idle buffer large enough a
// new one is allocated, and the idle ones stay. Buffers live until the pool is destroyed, with its
// ClientImpl or its PagedKv. Thread-safe; cost per Take: a lock and a scan of the idle buffers.

#include <bit>
#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "device/device_backend.h"

namespace granary::client {

class StagingPool {
 public:
  static constexpr size_t kMinBytes = 1u << 20;

  struct Buffer {
    device::DeviceRuntime* backend = nullptr;
    int device = -1;
    unsigned char* data = nullptr;
    size_t bytes = 0;
  };

  StagingPool() = default;
  ~StagingPool() {
    for (Buffer& b : idle_) b.backend->Free(b.device, b.data);
  }
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // The smallest idle buffer of (backend, device) holding `bytes` (> 0), or a new one; the
  // allocation's error, naming the size and the device.
  [[nodiscard]] absl::StatusOr<Buffer> Take(device::DeviceRuntime* backend, int device,
                                            size_t bytes) {
    {
      granary::common::MutexLock lock(&mu_);
      size_t best = idle_.size();
      for (size_t i = 0; i < idle_.size(); ++i) {
        const Buffer& b = idle_[i];
        if (b.backend == backend && b.device == device && b.bytes >= bytes &&
            (best == idle_.size() || b.bytes < idle_[best].bytes)) {
          best = i;
        }
      }
      if (best < idle_.size()) {
        Buffer b = idle_[best];
        idle_.erase(idle_.begin() + static_cast<ptrdiff_t>(best));
        return b;
      }
    }
    const size_t rounded = std::bit_ceil(bytes < kMinBytes ? kMinBytes : bytes);
    absl::StatusOr<void*> p = backend->Alloc(device, rounded);
    if (!p.ok()) {
      return absl::Status(p.status().code(),
                          absl::StrCat("allocating ", rounded, " bytes of staging on device ",
                                       device, ": ", p.status().message()));
    }
    return Buffer{backend, device, static_cast<unsigned char*>(*p), rounded};
  }

  // Back for reuse; its work must be complete.
  void Return(const Buffer& b) {
    granary::common::MutexLock lock(&mu_);
    idle_.push_back(b);
  }

 private:
  granary::common::Mutex mu_;
  std::vector<Buffer> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace granary::client
