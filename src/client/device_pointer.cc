// granary::IsDevicePointer: the active device backend's Classify (device/device_backend.h), the
// CUDA driver through dlopen when that backend is `none`, plus the tests' fake ranges.
#include "granary/device_pointer.h"

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "device/device_backend.h"
#include "device/driver_api.h"

namespace granary {

namespace {

struct FakeRanges {
  std::atomic<bool> any{false};
  granary::common::Mutex mu;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges ABSL_GUARDED_BY(mu);  // [begin, end)
};
FakeRanges& Fakes() {
  static FakeRanges* f = new FakeRanges();  // never destroyed: usable until the process ends
  return *f;
}

bool OverlapsFake(uintptr_t begin, uintptr_t end) {
  FakeRanges& f = Fakes();
  granary::common::MutexLock lock(&f.mu);
  for (const auto& [b, e] : f.ranges) {
    if (begin < e && b < end) return true;
  }
  return false;
}

}  // namespace

bool IsDevicePointer(const void* p, size_t n) {
  if (n == 0) return false;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = n > UINTPTR_MAX - begin ? UINTPTR_MAX : begin + n;
  if (Fakes().any.load(std::memory_order_acquire) && OverlapsFake(begin, end)) return true;
  const void* last = reinterpret_cast<const void*>(end - 1);
  device::DeviceRuntime& backend = device::ActiveRuntime();
  // With no usable backend in this process (a build without CUDA, or none chosen) the memory may
  // still be the engine's own CUDA memory, so the driver is asked directly (initializing nothing).
  const bool none = backend.Name() == "none";
  auto device = [&backend, none](const void* q) {
    const device::MemoryKind kind =
        none ? device::internal::ClassifyWithDriver(q).kind : backend.Classify(q).kind;
    return kind == device::MemoryKind::kDevice || kind == device::MemoryKind::kManaged;
  };
  return device(p) || (n > 1 && device(last));
}

namespace testing {

void AddFakeDeviceRange(const void* p, size_t n) {
  if (n == 0) return;
  FakeRanges& f = Fakes();
  granary::common::MutexLock lock(&f.mu);
  const auto begin = reinterpret_cast<uintptr_t>(p);
  f.ranges.emplace_back(begin, n > UINTPTR_MAX - begin ? UINTPTR_MAX : begin + n);
  f.any.store(true, std::memory_order_release);
}

void ClearFakeDeviceRanges() {
  FakeRanges& f = Fakes();
  granary::common::MutexLock lock(&f.mu);
  f.ranges.clear();
  f.any.store(false, std::memory_order_release);
}

}  // namespace testing
}  // namespace granary
