// The device backend choice in a binary without the fake backend (this test links granary::device
// alone): GRANARY_DEVICE_BACKEND=fake is refused with an error naming the value and the build
// option that links the fake in, as in a default granary_node or Python module; the other choices
// are unchanged. backend_fake_test.cc covers the choice where the fake is linked.

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "device/device_backend.h"

namespace granary::device {
namespace {

TEST(BackendChoiceWithoutTheFake, FakeIsRefusedSayingHowToGetIt) {
  std::string detail;
  DeviceBackend& backend = internal::ChooseBackend("fake", &detail);
  EXPECT_EQ(backend.runtime().Name(), "none");
  EXPECT_EQ(backend.runtime().DeviceCount(), 0);
  EXPECT_TRUE(absl::StartsWith(detail, "refused GRANARY_DEVICE_BACKEND='fake'")) << detail;
  EXPECT_TRUE(absl::StrContains(detail, "-DGRANARY_DEVICE_FAKE=ON")) << detail;
  for (const absl::Status& s :
       {backend.runtime().Alloc(0, 64).status(), backend.runtime().CreateStream(0).status(),
        backend.kernels().BatchCopy(0, nullptr, 0, nullptr)}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "GRANARY_DEVICE_BACKEND='fake'")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "-DGRANARY_DEVICE_FAKE=ON")) << s;
  }
  // The same refused backend again: the choice is kept per value.
  EXPECT_EQ(&internal::ChooseBackend("fake", &detail), &backend);
}

TEST(BackendChoiceWithoutTheFake, TheOtherValuesChooseAsBefore) {
  std::string detail;
  EXPECT_EQ(&internal::ChooseBackend("none", &detail), &NoneBackend());
  absl::StatusOr<void*> typo = internal::ChooseBackend("fak", &detail).runtime().Alloc(0, 64);
  EXPECT_EQ(typo.status().code(), absl::StatusCode::kInvalidArgument) << typo.status();
  EXPECT_TRUE(absl::StrContains(typo.status().message(), "GRANARY_DEVICE_BACKEND='fak'"))
      << typo.status();
}

}  // namespace
}  // namespace granary::device
