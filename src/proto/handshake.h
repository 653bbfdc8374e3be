#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/frame.h"

namespace granary::proto {

// The first bytes on a connection to a Granary RPC port (transport::RpcListener), before any
// UCX traffic. The listener reads nothing else from a stranger: it validates the 12-byte header
// (magic, version, body length bound) before it reads the body, and the body before it answers.
//
//   header: u32 magic 'GRNH' | u16 version | u16 flags (request) or code (reply) | u32 body_len
//   request body: str worker_address (the client worker's UCX address)
//   reply body:   str message (empty when code is 0), then on success u64 nonce, u16 flags,
//                 str host_id, str worker_address (the server worker's UCX address)
//
// The request's version is the newest protocol the client speaks; the reply's is the one the
// connection uses: the lower of the two sides' newest (docs/protocol.md). A server refuses a
// client below its window; a client refuses an answer outside its own.
// A code other than 0 is an absl::StatusCode; the server closes the socket after such a reply.
// On success the client connects a UCX endpoint to the server's worker address and sends
// kAttach with the nonce as its first frame; the socket stays open as the connection's
// liveness link (either side closing it, or dying, ends the connection).
inline constexpr uint32_t kHandshakeMagic = 0x484E5247;  // "GRNH"
inline constexpr size_t kHandshakeHeaderSize = 12;
// UCX worker addresses are a few hundred bytes per transport; this leaves room for many NICs.
inline constexpr uint32_t kMaxHandshakeBody = 32u << 10;
// Request flag: keep this connection off shared memory (GRANARY_CONTROL_SHM=0, or a server on
// another host): both sides connect with UCX peer-failure handling, which leaves shm out.
inline constexpr uint16_t kHandshakeFlagTcpOnly = 1;
inline constexpr uint16_t kHandshakeKnownFlags = kHandshakeFlagTcpOnly;

struct HandshakeRequest {
  uint16_t version = kProtocolVersion;
  uint16_t flags = 0;
  std::string worker_address;
  bool operator==(const HandshakeRequest&) const = default;
};

struct HandshakeReply {
  uint16_t version = kProtocolVersion;
  uint16_t code = 0;  // absl::StatusCode; 0 accepted
  std::string message;
  uint64_t nonce = 0;
  uint16_t flags = 0;  // kHandshakeFlagTcpOnly: the server keeps the connection off shm
  std::string host_id;
  std::string worker_address;
  bool operator==(const HandshakeReply&) const = default;
};

struct HandshakeHeader {
  uint16_t version = 0;
  uint16_t flags_or_code = 0;
  uint32_t body_len = 0;
};

// The version a server answers a client's handshake of `client_version` with (at least
// kMinProtocolVersion, which ParseHandshakeHeader checked): the lower of it and this build's.
uint16_t NegotiateVersion(uint16_t client_version);

// Checks the first kHandshakeHeaderSize bytes: the magic, the version with check_version (a
// request of a protocol older than this build's window is FAILED_PRECONDITION naming both; a
// newer one passes, to be answered with this build's; a client reads a refusal from a server
// of any version), and body_len <= kMaxHandshakeBody. Anything else is INVALID_ARGUMENT naming
// what was wrong (the magic as hex).
[[nodiscard]] absl::StatusOr<HandshakeHeader> ParseHandshakeHeader(absl::string_view header,
                                                                   bool check_version = true);

std::string EncodeHandshakeRequest(const HandshakeRequest& req);
std::string EncodeHandshakeReply(const HandshakeReply& rep);
// Whole messages (header and body); a reply of any version is read. Unknown flags, an empty worker
// address, trailing bytes or a body shorter than body_len are INVALID_ARGUMENT.
[[nodiscard]] absl::StatusOr<HandshakeRequest> DecodeHandshakeRequest(absl::string_view data);
[[nodiscard]] absl::StatusOr<HandshakeReply> DecodeHandshakeReply(absl::string_view data);

}  // namespace granary::proto
