#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace granary::proto {

// The protocol version that brought message `type` (the reply bit ignored; message_table.h's
// since column), or 0 when the table has no such message.
uint16_t MessageSince(uint16_t type);

// A whole frame re-encoded in `version` (a version this build speaks, as the frame's must be):
// its body is decoded in the frame's version as the table's Request for its type, or for a
// reply as the table's Reply (as a StatusReply when its status is not OK: a refusal carries
// nothing else that is read), then encoded in `version`. Going down, the fields the lower
// version lacks are dropped; going up they take their defaults (fields.h). The header is kept
// but for its version and body_len; a type the table lacks keeps its body as is.
// Cost: one decode and one encode of the body, its strings copied. Only a connection between
// two versions pays it (transport::RpcServer and RpcClient); one version costs a comparison.
[[nodiscard]] absl::StatusOr<std::string> TranscodeFrame(absl::string_view frame, uint16_t version);

}  // namespace granary::proto
