// The driver's pointer attributes through dlopen (driver_api.h).

#include "device/driver_api.h"

#include <dlfcn.h>

#include <cstdint>

namespace granary::device::internal {
namespace {

// The few driver API names used here, by value from cuda.h (stable since CUDA 7), so that no
// CUDA header or library is needed to build.
using CUresult = int;                    // CUDA_SUCCESS = 0
using CUdeviceptr = unsigned long long;  // NOLINT(runtime/int): the driver's own typedef
constexpr int kMemoryType = 2;           // CU_POINTER_ATTRIBUTE_MEMORY_TYPE (unsigned)
constexpr int kIsManaged = 8;            // CU_POINTER_ATTRIBUTE_IS_MANAGED (bool)
constexpr int kDeviceOrdinal = 9;        // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL (int)
constexpr unsigned kHostMemory = 1;      // CU_MEMORYTYPE_HOST
constexpr unsigned kDeviceMemory = 2;    // CU_MEMORYTYPE_DEVICE
constexpr unsigned kUnifiedMemory = 4;   // CU_MEMORYTYPE_UNIFIED
// cuPointerGetAttributes: unlike cuPointerGetAttribute, an address the driver does not know is
// not an error; its attributes come back zero.
using GetAttributesFn = CUresult (*)(unsigned count, int* attributes, void** data, CUdeviceptr p);

GetAttributesFn GetAttributes() {
  static const GetAttributesFn fn = []() -> GetAttributesFn {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return nullptr;
    return reinterpret_cast<GetAttributesFn>(dlsym(lib, "cuPointerGetAttributes"));
  }();
  return fn;
}

}  // namespace

bool DriverPresent() { return GetAttributes() != nullptr; }

PointerInfo ClassifyWithDriver(const void* p) {
  GetAttributesFn get = GetAttributes();
  if (p == nullptr || get == nullptr) return {};
  unsigned type = 0;
  unsigned managed = 0;  // a bool; read into a zeroed word
  int device = -1;
  int attributes[] = {kMemoryType, kIsManaged, kDeviceOrdinal};
  void* data[] = {&type, &managed, &device};
  const auto address = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
  if (get(3, attributes, data, address) != 0) return {};  // not initialized: no device memory
  if (managed != 0) return {MemoryKind::kManaged, device};
  if (type == kDeviceMemory || type == kUnifiedMemory) return {MemoryKind::kDevice, device};
  if (type == kHostMemory) return {MemoryKind::kPinnedHost, -1};
  return {};
}

}  // namespace granary::device::internal
