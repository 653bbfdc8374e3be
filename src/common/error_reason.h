#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "granary/error_reason.h"

namespace granary::common {

// The highest ErrorReason this build knows (a decoder rejects a higher wire value).
inline constexpr ErrorReason kLastErrorReason = ErrorReason::kNotLeader;

// The type URL of the payload that carries an ErrorReason on an absl::Status. Its value is the
// reason's name (ErrorReasonName), so that Status::ToString shows it readably.
inline constexpr absl::string_view kErrorReasonUrl = "granary/error_reason";

// `status` with `reason` attached (replacing any earlier one). OK stays OK (an OK status
// carries no payload); kNone removes the reason.
[[nodiscard]] absl::Status WithReason(absl::Status status, ErrorReason reason);

}  // namespace granary::common
