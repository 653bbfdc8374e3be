#pragma once

// Every wire message (the structs, by area, in the headers below), their table traits and the
// frame functions.

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "common/tier_preference.h"
#include "proto/alloc_header.h"
#include "proto/codec.h"
#include "proto/data_messages.h"
#include "proto/fields.h"
#include "proto/frame.h"
#include "proto/inventory_messages.h"
#include "proto/message_table.h"
#include "proto/object_messages.h"
#include "proto/session_messages.h"
#include "proto/wire_types.h"

namespace granary::proto {

// Each message's row of message_table.h: Message<MsgType::kGet>::Request is KeysRequest.
template <MsgType T>
struct Message;
#define GRANARY_MSG_TRAITS(Name, number, Req, Rep, since, server) \
  template <>                                                     \
  struct Message<MsgType::k##Name> {                              \
    using Request = Req;                                          \
    using Reply = Rep;                                            \
    static constexpr const char* kName = #Name;                   \
    static constexpr uint16_t kSince = since;                     \
    static constexpr Server kServer = Server::server;             \
  };
GRANARY_MESSAGES(GRANARY_MSG_TRAITS)
#undef GRANARY_MSG_TRAITS

// A message type as a type: the tag that proto::Serve's handlers and ForEachMessage take.
template <MsgType T>
using Tag = std::integral_constant<MsgType, T>;

// Calls fn(Tag<T>{}) for every message of the table, in its order.
template <class Fn>
constexpr void ForEachMessage(Fn&& fn) {
#define GRANARY_MSG_EACH(Name, ...) fn(Tag<MsgType::k##Name>{});
  GRANARY_MESSAGES(GRANARY_MSG_EACH)
#undef GRANARY_MSG_EACH
}

// Calls fn(Tag<T>{}) for the message whose type is `type` (the reply bit ignored); false, and
// no call, when the table has no such message.
template <class Fn>
bool VisitMessage(uint16_t type, Fn&& fn) {
  switch (static_cast<MsgType>(type & ~kReplyBit)) {
#define GRANARY_MSG_CASE(Name, ...) \
  case MsgType::k##Name:            \
    fn(Tag<MsgType::k##Name>{});    \
    return true;
    GRANARY_MESSAGES(GRANARY_MSG_CASE)
#undef GRANARY_MSG_CASE
    default:
      return false;
  }
}

// Builds a whole frame for message m, in `version` (a peer's older one: TranscodeFrame).
template <typename T>
std::string EncodeFrame(uint16_t type, uint64_t request_id, const T& m,
                        uint16_t version = kProtocolVersion) {
  std::string out;
  out.reserve(128);
  FrameHeader h;
  h.version = version;
  h.type = type;
  h.request_id = request_id;
  BeginFrame(h, &out);
  Writer w(&out, version);
  Encode(m, w);
  FinishFrame(&out);
  return out;
}

// Decodes a frame body of `version` into T, requiring that every byte is consumed.
template <typename T>
[[nodiscard]] absl::StatusOr<T> DecodeBody(absl::string_view body,
                                           uint16_t version = kProtocolVersion) {
  Reader r(body, version);
  T m;
  GRANARY_RETURN_IF_ERROR(Decode(r, &m));
  GRANARY_RETURN_IF_ERROR(r.Finish());
  return m;
}

}  // namespace granary::proto
