#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace granary::proto {

// Control-plane frame, little-endian, 32-byte header then the body:
//   u32 magic 'GRNY' | u16 version | u16 type | u32 flags | u64 request_id | u32 body_len |
//   i64 epoch
// body_len must equal the bytes that follow and be at most kMaxFrameBody. epoch (HA): in a
// request to a master, the epoch the sender's session was opened at (0: none); in a master's
// reply, the epoch of its last election, also once fenced (0: never elected, or no HA). Frames
// between clients and nodes carry 0.
inline constexpr uint32_t kFrameMagic = 0x594E5247;  // "GRNY"
// The protocol this build speaks, and the oldest one it still speaks with a peer: a peer of any
// version in between is served (docs/protocol.md: the window, the rule for changing the wire
// and every version's history). A connection uses the lower of the two sides' newest versions,
// agreed on in the handshake (proto/handshake.h).
inline constexpr uint16_t kProtocolVersion = 15;
inline constexpr uint16_t kMinProtocolVersion = 14;
// "13", or "13 to 14": the versions this build speaks, for messages.
std::string VersionRange();
// Whether this build speaks `version`.
constexpr bool SpeaksVersion(uint16_t version) {
  return version >= kMinProtocolVersion && version <= kProtocolVersion;
}
inline constexpr size_t kFrameHeaderSize = 32;
inline constexpr size_t kFrameEpochOffset = 24;
inline constexpr uint32_t kMaxFrameBody = 64u << 20;

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;
  uint32_t flags = 0;
  uint64_t request_id = 0;
  int64_t epoch = 0;
};

// A decoded frame; body points into the buffer that was decoded.
struct FrameView {
  FrameHeader header;
  absl::string_view body;
};

// Writes the header for a body of body_len bytes into out (which must be empty); the caller
// appends the body. FinishFrame patches body_len once the body is written.
void BeginFrame(const FrameHeader& h, std::string* out);
void FinishFrame(std::string* out);
// Sets the epoch of an encoded frame (no-op on a buffer shorter than a header).
void SetFrameEpoch(std::string* frame, int64_t epoch);
// The epoch of an encoded frame's header (0 for a buffer shorter than a header); no other
// check.
int64_t FrameEpoch(absl::string_view frame);

// Parses a whole frame. Truncated, oversized or wrong-magic input is an INVALID_ARGUMENT naming
// what was wrong; a version this build does not speak is FAILED_PRECONDITION naming it and this
// build's versions. The body is in the header's version (TranscodeFrame brings an older one to
// kProtocolVersion).
[[nodiscard]] absl::StatusOr<FrameView> DecodeFrame(absl::string_view data);

}  // namespace granary::proto
