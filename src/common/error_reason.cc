#include "common/error_reason.h"

#include "absl/strings/cord.h"

namespace granary {  // public API: granary/error_reason.h, and its table

namespace {

// Every named reason, in enum order. ErrorReasonName and ErrorReasonOf both read this table.
constexpr struct {
  ErrorReason reason;
  const char* name;
} kReasons[] = {
    {ErrorReason::kQuotaExceeded, "QUOTA_EXCEEDED"},
    {ErrorReason::kTenantNotRegistered, "TENANT_NOT_REGISTERED"},
    {ErrorReason::kAdmissionClosed, "ADMISSION_CLOSED"},
    {ErrorReason::kUnavailableInCurrentMode, "UNAVAILABLE_IN_CURRENT_MODE"},
    {ErrorReason::kTenantNotFound, "TENANT_NOT_FOUND"},
    {ErrorReason::kTenantNotEmpty, "TENANT_NOT_EMPTY"},
    {ErrorReason::kNotActive, "NOT_ACTIVE"},
    {ErrorReason::kInvalidTenantId, "INVALID_TENANT_ID"},
    {ErrorReason::kHasLease, "HAS_LEASE"},
    {ErrorReason::kDevicePointer, "DEVICE_POINTER"},
    {ErrorReason::kNotLeader, "NOT_LEADER"},
};

}  // namespace

const char* ErrorReasonName(ErrorReason reason) {
  if (reason == ErrorReason::kNone) return "NONE";
  for (const auto& r : kReasons) {
    if (r.reason == reason) return r.name;
  }
  return "UNKNOWN";
}

// Reads the payload WithReason wrote: the name of a reason this build knows.
ErrorReason ErrorReasonOf(const absl::Status& status) {
  if (status.ok()) return ErrorReason::kNone;
  const auto payload = status.GetPayload(common::kErrorReasonUrl);  // absl::optional<absl::Cord>
  if (!payload.has_value()) return ErrorReason::kNone;
  for (const auto& r : kReasons) {
    if (*payload == r.name) return r.reason;
  }
  return ErrorReason::kNone;
}

}  // namespace granary

namespace granary::common {

absl::Status WithReason(absl::Status status, ErrorReason reason) {
  if (reason == ErrorReason::kNone) {
    status.ErasePayload(kErrorReasonUrl);
  } else {
    status.SetPayload(kErrorReasonUrl, absl::Cord(ErrorReasonName(reason)));
  }
  return status;
}

}  // namespace granary::common
