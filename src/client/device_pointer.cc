// granary::IsDevicePointer: the active device backend's Classify (cuda/device_backend.h), the
// CUDA driver through dlopen when that backend is `none`, plus the tests' fake ranges.
#include "granary/device_pointer.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "cuda/device_backend.h"

namespace granary {

namespace {

// The few driver API names used here, declared by value from cuda.h (stable since CUDA 4), so
// that no CUDA header or library is needed to build.
using CUresult = int;                             // CUDA_SUCCESS = 0
using CUdeviceptr = unsigned long long;           // NOLINT(runtime/int): the driver's own typedef
constexpr int kCuPointerAttributeMemoryType = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kCuPointerAttributeIsManaged = 8;   // CU_POINTER_ATTRIBUTE_IS_MANAGED
constexpr unsigned kCuMemoryTypeDevice = 2;       // CU_MEMORYTYPE_DEVICE
constexpr unsigned kCuMemoryTypeUnified = 4;      // CU_MEMORYTYPE_UNIFIED
using PointerGetAttributeFn = CUresult (*)(void* data, int attribute, CUdeviceptr ptr);

// cuPointerGetAttribute, or null when libcuda.so.1 is absent. Opened once and never closed.
PointerGetAttributeFn Driver() {
  static const PointerGetAttributeFn fn = []() -> PointerGetAttributeFn {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return nullptr;
    return reinterpret_cast<PointerGetAttributeFn>(dlsym(lib, "cuPointerGetAttribute"));
  }();
  return fn;
}

bool DriverSaysDevice(PointerGetAttributeFn get, const void* p) {
  const auto ptr = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
  unsigned type = 0;
  if (get(&type, kCuPointerAttributeMemoryType, ptr) != 0) return false;
  if (type == kCuMemoryTypeDevice || type == kCuMemoryTypeUnified) return true;
  unsigned managed = 0;
  return get(&managed, kCuPointerAttributeIsManaged, ptr) == 0 && managed != 0;
}

struct FakeRanges {
  std::atomic<bool> any{false};
  granary::Mutex mu;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges ABSL_GUARDED_BY(mu);  // [begin, end)
};
FakeRanges& Fakes() {
  static FakeRanges* f = new FakeRanges();  // never destroyed: usable until the process ends
  return *f;
}

bool OverlapsFake(uintptr_t begin, uintptr_t end) {
  FakeRanges& f = Fakes();
  granary::MutexLock lock(&f.mu);
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
  cuda::DeviceBackend& backend = cuda::ActiveBackend();
  if (backend.Name() != "none") {
    auto device = [&backend](const void* q) {
      const cuda::MemoryKind kind = backend.Classify(q).kind;
      return kind == cuda::MemoryKind::kDevice || kind == cuda::MemoryKind::kManaged;
    };
    return device(p) || (n > 1 && device(last));
  }
  // No usable backend in this process (a build without CUDA, or none chosen): the memory may
  // still be the engine's own CUDA memory, so ask the driver directly.
  PointerGetAttributeFn get = Driver();
  if (get == nullptr) return false;
  return DriverSaysDevice(get, p) || (n > 1 && DriverSaysDevice(get, last));
}

namespace testing {

void AddFakeDeviceRange(const void* p, size_t n) {
  if (n == 0) return;
  FakeRanges& f = Fakes();
  granary::MutexLock lock(&f.mu);
  const auto begin = reinterpret_cast<uintptr_t>(p);
  f.ranges.emplace_back(begin, n > UINTPTR_MAX - begin ? UINTPTR_MAX : begin + n);
  f.any.store(true, std::memory_order_release);
}

void ClearFakeDeviceRanges() {
  FakeRanges& f = Fakes();
  granary::MutexLock lock(&f.mu);
  f.ranges.clear();
  f.any.store(false, std::memory_order_release);
}

}  // namespace testing
}  // namespace granary
