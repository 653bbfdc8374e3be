#include "proto/handshake.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/codec.h"

namespace granary::proto {
namespace {

// The longest error message a reply carries.
constexpr size_t kMaxReplyMessage = 1024;

void PutHeader(uint16_t version, uint16_t flags_or_code, std::string* out) {
  Writer w(out);
  w.U32(kHandshakeMagic);
  w.U16(version);
  w.U16(flags_or_code);
  w.U32(0);  // body_len, patched by PatchLength
}

void PatchLength(std::string* out) {
  const uint32_t len = static_cast<uint32_t>(out->size() - kHandshakeHeaderSize);
  std::memcpy(out->data() + 8, &len, 4);
}

// The header, then exactly body_len bytes of body.
absl::StatusOr<absl::string_view> Body(absl::string_view data, HandshakeHeader* h,
                                       bool check_version) {
  auto parsed = ParseHandshakeHeader(data, check_version);
  if (!parsed.ok()) return parsed.status();
  *h = *parsed;
  const size_t have = data.size() - kHandshakeHeaderSize;
  if (have != h->body_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("handshake body is ", have, " bytes, its header says ", h->body_len));
  }
  return data.substr(kHandshakeHeaderSize);
}

}  // namespace

uint16_t NegotiateVersion(uint16_t client_version) {
  return std::min(client_version, kProtocolVersion);
}

absl::StatusOr<HandshakeHeader> ParseHandshakeHeader(absl::string_view header, bool check_version) {
  if (header.size() < kHandshakeHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat("handshake header truncated: ", header.size(),
                                                   " of ", kHandshakeHeaderSize, " bytes"));
  }
  Reader r(header.substr(0, kHandshakeHeaderSize));
  const uint32_t magic = r.U32("magic");
  HandshakeHeader h;
  h.version = r.U16("version");
  h.flags_or_code = r.U16("flags");
  h.body_len = r.U32("body_len");
  if (magic != kHandshakeMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "not a Granary handshake: magic 0x%08x, expected 0x%08x ('GRNH')", magic, kHandshakeMagic));
  }
  if (check_version && h.version < kMinProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat("protocol version ", h.version,
                                                      " is not served here (this process speaks ",
                                                      VersionRange(), ")"));
  }
  if (h.body_len > kMaxHandshakeBody) {
    return absl::InvalidArgumentError(absl::StrCat(
        "handshake body of ", h.body_len, " bytes is over the bound of ", kMaxHandshakeBody));
  }
  return h;
}

std::string EncodeHandshakeRequest(const HandshakeRequest& req) {
  std::string out;
  PutHeader(req.version, req.flags, &out);
  Writer(&out).Str(req.worker_address);
  PatchLength(&out);
  return out;
}

std::string EncodeHandshakeReply(const HandshakeReply& rep) {
  std::string out;
  PutHeader(rep.version, rep.code, &out);
  Writer w(&out);
  w.Str(rep.message.substr(0, kMaxReplyMessage));
  if (rep.code == 0) {
    w.U64(rep.nonce);
    w.U16(rep.flags);
    w.Str(rep.host_id);
    w.Str(rep.worker_address);
  }
  PatchLength(&out);
  return out;
}

absl::StatusOr<HandshakeRequest> DecodeHandshakeRequest(absl::string_view data) {
  HandshakeHeader h;
  auto body = Body(data, &h, /*check_version=*/true);
  if (!body.ok()) return body.status();
  if ((h.flags_or_code & ~kHandshakeKnownFlags) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake flags 0x%04x carry unknown bits (known: 0x%04x)",
                        h.flags_or_code, kHandshakeKnownFlags));
  }
  HandshakeRequest req;
  req.version = h.version;
  req.flags = h.flags_or_code;
  Reader r(*body);
  req.worker_address = r.Str("worker_address", kMaxHandshakeBody);
  if (absl::Status st = r.Finish(); !st.ok()) return st;
  if (req.worker_address.empty()) {
    return absl::InvalidArgumentError("handshake carries an empty worker address");
  }
  return req;
}

absl::StatusOr<HandshakeReply> DecodeHandshakeReply(absl::string_view data) {
  HandshakeHeader h;
  auto body = Body(data, &h, /*check_version=*/false);
  if (!body.ok()) return body.status();
  HandshakeReply rep;
  rep.version = h.version;
  rep.code = h.flags_or_code;
  Reader r(*body);
  rep.message = r.Str("message", kMaxReplyMessage);
  if (rep.code == 0) {
    rep.nonce = r.U64("nonce");
    rep.flags = r.U16("flags");
    rep.host_id = r.Str("host_id", kMaxHandshakeBody);
    rep.worker_address = r.Str("worker_address", kMaxHandshakeBody);
  }
  if (absl::Status st = r.Finish(); !st.ok()) return st;
  if (rep.code == 0 && (rep.flags & ~kHandshakeKnownFlags) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake reply flags 0x%04x carry unknown bits", rep.flags));
  }
  if (rep.code == 0 && rep.worker_address.empty()) {
    return absl::InvalidArgumentError("handshake reply carries an empty worker address");
  }
  return rep;
}

}  // namespace granary::proto
