// libFuzzer target: the RPC port's handshake (proto/handshake.h), the only bytes a stranger's
// connection reaches. Invariants: the header check and the decoders never read past the input
// or accept a body over kMaxHandshakeBody; an accepted request or reply encodes back to the
// same bytes; a decoded request always has a worker address and only known flags.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "proto/handshake.h"

using granary::proto::DecodeHandshakeReply;
using granary::proto::DecodeHandshakeRequest;
using granary::proto::EncodeHandshakeReply;
using granary::proto::EncodeHandshakeRequest;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view in(reinterpret_cast<const char*>(data), size);
  auto h = granary::proto::ParseHandshakeHeader(in);
  if (h.ok() && h->body_len > granary::proto::kMaxHandshakeBody) {
    std::fprintf(stderr, "header accepted a body of %u bytes\n", h->body_len);
    std::abort();
  }
  if (auto req = DecodeHandshakeRequest(in); req.ok()) {
    if (!h.ok() || req->worker_address.empty() ||
        (req->flags & ~granary::proto::kHandshakeKnownFlags) != 0) {
      std::fprintf(stderr, "request accepted past the header check or with bad fields\n");
      std::abort();
    }
    if (EncodeHandshakeRequest(*req) != in) {
      std::fprintf(stderr, "request does not encode back to its bytes\n");
      std::abort();
    }
  }
  if (auto rep = DecodeHandshakeReply(in); rep.ok()) {
    // A reply's message is cut to its bound when encoded; only one within it round-trips.
    if (rep->message.size() <= 1024 && EncodeHandshakeReply(*rep) != in) {
      std::fprintf(stderr, "reply does not encode back to its bytes\n");
      std::abort();
    }
  }
  return 0;
}
