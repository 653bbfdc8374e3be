#include "proto/serve.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "proto/messages.h"

namespace granary::proto {
namespace {

// A node-like server: every kNode message of the table, answered by its handler.
std::optional<std::string> ServeNode(const FrameView& f, std::string* seen) {
  auto refuse = [&](const absl::Status& st) {
    *seen = std::string(st.message());
    return EncodeFrame(static_cast<uint16_t>(f.header.type | kReplyBit), f.header.request_id,
                       StatusReply{WireStatus::From(st)});
  };
  auto answer = [&](const char* name) {
    *seen = name;
    return std::optional<std::string>(std::string(name));
  };
  return ServeFrame<Server::kNode>(
      f,
      Overloaded{[&](Tag<MsgType::kFetch>) { return answer("fetch"); },
                 [&](Tag<MsgType::kPush>) { return answer("push"); },
                 [&](Tag<MsgType::kRead>) { return answer("read"); },
                 [&](Tag<MsgType::kWrite>) { return answer("write"); }},
      refuse);
}

FrameView View(const std::string& frame) {
  absl::StatusOr<FrameView> f = DecodeFrame(frame);
  EXPECT_TRUE(f.ok()) << f.status();
  return *f;
}

TEST(Serve, DecodesTheTablesRequestAndEncodesTheHandlersReply) {
  const std::string frame =
      EncodeFrame(static_cast<uint16_t>(MsgType::kGet), 7, GetRequest{{"a", "b"}});
  auto out = Serve<Server::kMaster>(View(frame),
                                    Overloaded{[](Tag<MsgType::kGet>, const GetRequest& req) {
                                                 GetReply rep;
                                                 rep.results.resize(req.keys.size());
                                                 return rep;
                                               },
                                               [](auto, const auto&) { return StatusReply{}; }},
                                    [](const absl::Status&) { return std::string("refused"); });
  ASSERT_TRUE(out.has_value());
  absl::StatusOr<FrameView> reply = DecodeFrame(*out);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->header.type, static_cast<uint16_t>(MsgType::kGet) | kReplyBit);
  EXPECT_EQ(reply->header.request_id, 7u);
  absl::StatusOr<GetReply> rep = DecodeBody<GetReply>(reply->body);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_EQ(rep->results.size(), 2u);
}

TEST(Serve, EachMessageGoesToItsHandler) {
  std::string seen;
  EXPECT_EQ(
      ServeNode(View(EncodeFrame(static_cast<uint16_t>(MsgType::kRead), 1, ReadRequest{})), &seen),
      "read");
  EXPECT_EQ(ServeNode(View(EncodeFrame(static_cast<uint16_t>(MsgType::kFetch), 1, FetchRequest{})),
                      &seen),
            "fetch");
}

TEST(Serve, AnotherServersMessageIsRefusedNamingWhoServesIt) {
  std::string seen;
  ServeNode(View(EncodeFrame(static_cast<uint16_t>(MsgType::kGet), 1, GetRequest{})), &seen);
  EXPECT_EQ(seen, "Get is served by the master, not a node");
}

TEST(Serve, UnknownTypesAndRepliesAreRefused) {
  std::string seen;
  ServeNode(View(EncodeFrame(999, 1, StatusReply{})), &seen);
  EXPECT_EQ(seen, "unknown message type 999");
  ServeNode(View(EncodeFrame(static_cast<uint16_t>(MsgType::kStat), 1, StatusReply{})), &seen);
  EXPECT_EQ(seen, "unknown message type 14");
  ServeNode(View(EncodeFrame(static_cast<uint16_t>(MsgType::kRead) | kReplyBit, 1, ReadReply{})),
            &seen);
  EXPECT_EQ(seen, "unknown message type 26");
}

TEST(Serve, ABodyThatDoesNotDecodeIsRefusedNamingTheField) {
  std::string seen;
  const std::string frame =
      EncodeFrame(static_cast<uint16_t>(MsgType::kList), 3, ListRequest{"p", "", 0});
  auto out = Serve<Server::kMaster>(
      View(frame), [](auto, const auto&) { return StatusReply{}; },
      [&](const absl::Status& st) {
        seen = std::string(st.message());
        return std::string("refused");
      });
  EXPECT_EQ(out, "refused");
  EXPECT_TRUE(absl::StrContains(seen, "list limit 0")) << seen;
}

}  // namespace
}  // namespace granary::proto
