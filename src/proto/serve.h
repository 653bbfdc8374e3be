#pragma once

#include <optional>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/frame.h"
#include "proto/messages.h"

namespace granary::proto {

// Overloaded{lambda...}: one callable with every lambda's overloads (a Serve handler).
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

// "the master", "a node", "the RPC layer".
const char* ServerName(Server server);

// Serves one request frame as `server` (message_table.h's last column), for handlers that
// decode the body themselves (a node's, which decode Read and Write as views): calls
// handler(Tag<T>{}) for the frame's message and takes the frame it returns (nullopt: it answers
// later). refuse(status) answers a type this server does not serve (another server's, or none
// of the table's). The handler must take every message of `server`: a row added to the table
// does not compile here until it does.
template <Server kServer, class Handler, class Refuse>
std::optional<std::string> ServeFrame(const FrameView& f, Handler&& handler, Refuse&& refuse) {
  std::optional<std::string> out;
  const bool known =
      (f.header.type & kReplyBit) == 0 && VisitMessage(f.header.type, [&](auto tag) {
        using M = Message<decltype(tag)::value>;
        if constexpr (M::kServer != kServer) {
          out = refuse(absl::InvalidArgumentError(absl::StrCat(
              M::kName, " is served by ", ServerName(M::kServer), ", not ", ServerName(kServer))));
        } else {
          static_assert(
              std::is_invocable_r_v<std::optional<std::string>, Handler&, decltype(tag)>,
              "ServeFrame: the handler lacks a message of this server (see the tag above)");
          out = handler(tag);
        }
      });
  if (!known) {
    out = refuse(absl::InvalidArgumentError(
        absl::StrCat("unknown message type ", f.header.type & ~kReplyBit)));
  }
  return out;
}

// The same with the body decoded here as the table's Request for the frame's type:
// handler(Tag<T>{}, request) returns the table's Reply struct or a StatusReply (encoded here,
// with the request's id), or a frame it made itself (std::optional<std::string>). A body that
// does not decode goes to refuse(status), naming the field.
template <Server kServer, class Handler, class Refuse>
std::optional<std::string> Serve(const FrameView& f, Handler&& handler, Refuse&& refuse) {
  auto decode_and_call = [&](auto tag) -> std::optional<std::string> {
    using M = Message<decltype(tag)::value>;
    using Req = typename M::Request;
    static_assert(std::is_invocable_v<Handler&, decltype(tag), const Req&>,
                  "Serve: the handler lacks a message of this server (see the tag above)");
    absl::StatusOr<Req> req = DecodeBody<Req>(f.body);
    if (!req.ok()) return refuse(req.status());
    using R = std::invoke_result_t<Handler&, decltype(tag), const Req&>;
    if constexpr (std::is_same_v<R, std::optional<std::string>>) {
      return handler(tag, *req);
    } else {
      static_assert(std::is_same_v<R, typename M::Reply> || std::is_same_v<R, StatusReply>,
                    "Serve: a handler returns its message's Reply, a StatusReply or a frame");
      return EncodeFrame(static_cast<uint16_t>(f.header.type | kReplyBit), f.header.request_id,
                         handler(tag, *req));
    }
  };
  return ServeFrame<kServer>(f, decode_and_call, refuse);
}

}  // namespace granary::proto
