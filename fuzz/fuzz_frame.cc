// libFuzzer target: the control-plane frame decoder and every message body decoder.
//
// The input is treated as a whole frame: DecodeFrame must never crash, and when it accepts the
// frame the body is decoded as the message type its header names (request or reply). The body
// is then also fed to every message decoder, whatever the type field says. For every body a
// decoder accepts, re-encoding the message and decoding it again must succeed (abort otherwise).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "proto/frame.h"
#include "proto/messages.h"

namespace {

using namespace granary::proto;  // NOLINT

template <typename T>
void Try(absl::string_view body) {
  auto m = DecodeBody<T>(body);
  if (!m.ok()) return;
  std::string again;
  Writer w(&again);
  Encode(*m, w);
  auto m2 = DecodeBody<T>(again);
  if (!m2.ok()) {
    std::fprintf(stderr, "re-encoded message does not decode: %s\n",
                 m2.status().ToString().c_str());
    std::abort();
  }
  std::string third;
  Writer w3(&third);
  Encode(*m2, w3);
  if (third != again) {
    std::fprintf(stderr, "encode(decode(encode(m))) != encode(m)\n");
    std::abort();
  }
}

// Every request and reply struct of message_table.h, and the zero-copy views of Read and Write.
void TryAll(absl::string_view body) {
  ForEachMessage([&](auto tag) {
    using M = Message<decltype(tag)::value>;
    Try<typename M::Request>(body);
    Try<typename M::Reply>(body);
  });
  Try<ReadReplyView>(body);
  Try<WriteRequestView>(body);
}

// Decodes the body as the message(s) the header's type names, as the servers and the client do.
void Dispatch(uint16_t type, absl::string_view body) {
  (void)MsgTypeName(type);
  const bool reply = (type & kReplyBit) != 0;
  if (reply) Try<StatusReply>(body);  // any failed request is answered with a StatusReply
  // kStat has no message of its own; unknown types are answered with StatusReply.
  VisitMessage(type, [&](auto tag) {
    using M = Message<decltype(tag)::value>;
    reply ? Try<typename M::Reply>(body) : Try<typename M::Request>(body);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view in(reinterpret_cast<const char*>(data), size);
  auto f = DecodeFrame(in);
  if (f.ok()) {
    Dispatch(f->header.type, f->body);
    TryAll(f->body);
  } else if (size > kFrameHeaderSize) {
    // Bodies behind a rejected header are still worth decoding: the body decoders see the
    // mutated bytes even when the mutator has broken the magic or body_len.
    TryAll(in.substr(kFrameHeaderSize));
  }
  return 0;
}
