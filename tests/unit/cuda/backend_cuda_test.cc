// The CUDA runtime backend against the same bodies as the fake (backend_conformance.h). Label
// gpu: every test skips where the build has no CUDA or the machine no device.

#include <gtest/gtest.h>

#include <memory>

#include "cuda/device_backend.h"
#include "tests/unit/cuda/backend_conformance.h"

namespace granary::cuda {
namespace {

struct CudaTraits {
  static constexpr char kName[] = "cuda";
  static DeviceBackend* Make(std::unique_ptr<DeviceBackend>*) { return CudaBackend(); }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, BackendTest, ::testing::Types<CudaTraits>);

}  // namespace
}  // namespace granary::cuda
