// The RPC port's handshake codec (proto/handshake.h): what it accepts and what it refuses, with
// messages that name the bad value.
#include "proto/handshake.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace granary::proto {
namespace {

TEST(Handshake, RequestAndReplyRoundTrip) {
  HandshakeRequest req;
  req.flags = kHandshakeFlagTcpOnly;
  req.worker_address = std::string("\x00ucx\xff address", 13);
  const std::string bytes = EncodeHandshakeRequest(req);
  ASSERT_EQ(bytes.size(), kHandshakeHeaderSize + 4 + 13);
  auto back = DecodeHandshakeRequest(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, req);

  HandshakeReply rep;
  rep.nonce = 0xfedcba9876543210ull;
  rep.flags = kHandshakeFlagTcpOnly;
  rep.host_id = "boot-id";
  rep.worker_address = "server";
  auto rep_back = DecodeHandshakeReply(EncodeHandshakeReply(rep));
  ASSERT_TRUE(rep_back.ok()) << rep_back.status();
  EXPECT_EQ(*rep_back, rep);

  HandshakeReply refused;
  refused.code = 9;
  refused.message = "no";
  refused.nonce = 5;  // not sent with a refusal
  auto refused_back = DecodeHandshakeReply(EncodeHandshakeReply(refused));
  ASSERT_TRUE(refused_back.ok()) << refused_back.status();
  EXPECT_EQ(refused_back->code, 9);
  EXPECT_EQ(refused_back->message, "no");
  EXPECT_EQ(refused_back->nonce, 0u);
}

TEST(Handshake, HeaderIsCheckedBeforeAnyBody) {
  HandshakeRequest req;
  req.worker_address = "w";
  std::string bytes = EncodeHandshakeRequest(req);
  // Truncated header.
  auto h = ParseHandshakeHeader(bytes.substr(0, 11));
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(h.status().message(), "11 of 12")) << h.status();
  // Wrong magic, named in hex.
  std::string zeros(16, '\0');
  h = ParseHandshakeHeader(zeros);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(h.status().message(), "0x00000000")) << h.status();
  // A version below the window: FAILED_PRECONDITION naming both; a reply of any version is
  // still read.
  std::string other = bytes;
  const uint16_t v = kMinProtocolVersion - 1;
  std::memcpy(other.data() + 4, &v, 2);
  h = ParseHandshakeHeader(other);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(h.status().message(), absl::StrCat("protocol version ", v)))
      << h.status();
  EXPECT_TRUE(absl::StrContains(h.status().message(), absl::StrCat(kProtocolVersion)))
      << h.status();
  EXPECT_TRUE(ParseHandshakeHeader(other, /*check_version=*/false).ok());
  // A newer client passes: the server answers it with its own version.
  std::string newer = bytes;
  const uint16_t n = kProtocolVersion + 1;
  std::memcpy(newer.data() + 4, &n, 2);
  h = ParseHandshakeHeader(newer);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version, n);
  EXPECT_EQ(NegotiateVersion(n), kProtocolVersion);
  EXPECT_EQ(NegotiateVersion(kMinProtocolVersion), kMinProtocolVersion);
  // A body length over the bound, refused from the header alone.
  std::string huge = bytes.substr(0, kHandshakeHeaderSize);
  const uint32_t len = kMaxHandshakeBody + 1;
  std::memcpy(huge.data() + 8, &len, 4);
  h = ParseHandshakeHeader(huge);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(h.status().message(), absl::StrCat(len))) << h.status();
}

TEST(Handshake, BadBodiesAreRefused) {
  HandshakeRequest req;
  req.worker_address = "w";
  const std::string bytes = EncodeHandshakeRequest(req);
  // Short body, trailing bytes.
  EXPECT_FALSE(DecodeHandshakeRequest(bytes.substr(0, bytes.size() - 1)).ok());
  EXPECT_FALSE(DecodeHandshakeRequest(bytes + "x").ok());
  // Unknown flags.
  std::string flagged = bytes;
  flagged[7] = '\x01';
  auto r = DecodeHandshakeRequest(flagged);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "0x0100")) << r.status();
  // No worker address.
  req.worker_address.clear();
  r = DecodeHandshakeRequest(EncodeHandshakeRequest(req));
  EXPECT_TRUE(absl::StrContains(r.status().message(), "empty worker address")) << r.status();
  // A string length inside the body that claims more than the body holds.
  std::string lying = bytes;
  const uint32_t claim = 1000;
  std::memcpy(lying.data() + kHandshakeHeaderSize, &claim, 4);
  EXPECT_FALSE(DecodeHandshakeRequest(lying).ok());
}

}  // namespace
}  // namespace granary::proto
