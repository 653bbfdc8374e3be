#pragma once

// Backend streams kept for reuse by the client's device paths (client/gpu_segments.h,
// client/device_transfers.h): a caller takes one for its batch and returns it, or destroys it
// when it saw an error (a CUDA stream that did is not reused). Dropping the stream does not
// recover from a sticky device error (an illegal address in a copy or kernel): that breaks the
// CUDA context, and every later CUDA call of the process fails, the engine's too, until the
// process restarts. Thread-safe.

#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "device/device_backend.h"

namespace granary::client {

class StreamPool {
 public:
  struct Stream {
    device::DeviceRuntime* backend = nullptr;
    int device = -1;
    void* handle = nullptr;
  };
  StreamPool() = default;
  ~StreamPool() {
    for (Stream& s : idle_) s.backend->DestroyStream(s.handle);
  }
  StreamPool(const StreamPool&) = delete;
  StreamPool& operator=(const StreamPool&) = delete;

  // An idle stream of (backend, device), or a new one.
  [[nodiscard]] absl::StatusOr<Stream> Take(device::DeviceRuntime* backend, int device) {
    {
      granary::common::MutexLock lock(&mu_);
      for (size_t i = 0; i < idle_.size(); ++i) {
        if (idle_[i].backend == backend && idle_[i].device == device) {
          Stream s = idle_[i];
          idle_.erase(idle_.begin() + static_cast<ptrdiff_t>(i));
          return s;
        }
      }
    }
    absl::StatusOr<void*> handle = backend->CreateStream(device);
    if (!handle.ok()) return handle.status();
    return Stream{backend, device, *handle};
  }
  // Back to the pool (ok) or destroyed (it saw an error).
  void Return(Stream s, bool ok) {
    if (!ok) {
      s.backend->DestroyStream(s.handle);
      return;
    }
    granary::common::MutexLock lock(&mu_);
    idle_.push_back(s);
  }

 private:
  granary::common::Mutex mu_;
  std::vector<Stream> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace granary::client
