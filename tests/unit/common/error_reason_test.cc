#include "common/error_reason.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "granary/error_reason.h"

namespace granary {
namespace {

TEST(ErrorReason, AttachedReasonIsReadBackAndTheStatusIsOtherwiseUnchanged) {
  absl::Status plain = absl::ResourceExhaustedError("QUOTA_EXCEEDED: tenant 'a'");
  absl::Status st = common::WithReason(plain, ErrorReason::kQuotaExceeded);
  EXPECT_EQ(ErrorReasonOf(st), ErrorReason::kQuotaExceeded);
  EXPECT_EQ(st.code(), plain.code());
  EXPECT_EQ(st.message(), plain.message());
  EXPECT_EQ(ErrorReasonOf(plain), ErrorReason::kNone);
}

TEST(ErrorReason, ALaterReasonReplacesAndNoneRemoves) {
  absl::Status st = common::WithReason(absl::NotFoundError("x"), ErrorReason::kTenantNotFound);
  st = common::WithReason(st, ErrorReason::kTenantNotEmpty);
  EXPECT_EQ(ErrorReasonOf(st), ErrorReason::kTenantNotEmpty);
  st = common::WithReason(st, ErrorReason::kNone);
  EXPECT_EQ(ErrorReasonOf(st), ErrorReason::kNone);
  EXPECT_FALSE(st.GetPayload(common::kErrorReasonUrl).has_value());
}

TEST(ErrorReason, OkCarriesNone) {
  EXPECT_EQ(common::WithReason(absl::OkStatus(), ErrorReason::kQuotaExceeded), absl::OkStatus());
  EXPECT_EQ(ErrorReasonOf(absl::OkStatus()), ErrorReason::kNone);
}

TEST(ErrorReason, AMessagePrefixIsNotAReason) {
  EXPECT_EQ(ErrorReasonOf(absl::ResourceExhaustedError("QUOTA_EXCEEDED: looks like one")),
            ErrorReason::kNone);
}

TEST(ErrorReason, EveryReasonHasADistinctNameAndSurvivesTheRoundTrip) {
  std::set<std::string> names;
  for (uint8_t v = 1; v <= static_cast<uint8_t>(common::kLastErrorReason); ++v) {
    const auto reason = static_cast<ErrorReason>(v);
    const std::string name = ErrorReasonName(reason);
    EXPECT_NE(name, "UNKNOWN") << int{v};
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(ErrorReasonOf(common::WithReason(absl::InternalError("x"), reason)), reason) << name;
  }
  EXPECT_STREQ(ErrorReasonName(ErrorReason::kNone), "NONE");
  EXPECT_STREQ(ErrorReasonName(ErrorReason::kQuotaExceeded), "QUOTA_EXCEEDED");
  EXPECT_STREQ(ErrorReasonName(ErrorReason::kNotActive), "NOT_ACTIVE");
  EXPECT_STREQ(ErrorReasonName(ErrorReason::kHasLease), "HAS_LEASE");
  EXPECT_STREQ(ErrorReasonName(ErrorReason::kDevicePointer), "DEVICE_POINTER");
  EXPECT_EQ(static_cast<int>(ErrorReason::kHasLease), 9);  // wire values never change
  EXPECT_EQ(static_cast<int>(ErrorReason::kDevicePointer), 10);
  const auto past = static_cast<ErrorReason>(static_cast<uint8_t>(common::kLastErrorReason) + 1);
  EXPECT_STREQ(ErrorReasonName(past), "UNKNOWN");
}

}  // namespace
}  // namespace granary
