// The CUDA runtime backend against the same bodies as the fake (backend_conformance.h). Label
// gpu: every test skips where the build has no CUDA or the machine no device.

#include <gtest/gtest.h>

#include <memory>

#include "device/device_backend.h"
#include "tests/unit/device/backend_conformance.h"

namespace granary::device {
namespace {

struct CudaTraits {
  static constexpr char kName[] = "cuda";
  static DeviceBackend* Make(std::unique_ptr<DeviceBackend>*) { return CudaBackend(); }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, BackendTest, ::testing::Types<CudaTraits>);

}  // namespace
}  // namespace granary::device
