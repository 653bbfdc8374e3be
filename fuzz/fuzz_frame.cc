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

void TryAll(absl::string_view body) {
  Try<HelloRequest>(body);
  Try<HelloReply>(body);
  Try<HeartbeatRequest>(body);
  Try<HeartbeatReply>(body);
  Try<MountSegmentRequest>(body);
  Try<MountSegmentReply>(body);
  Try<UnmountSegmentRequest>(body);
  Try<StatusReply>(body);
  Try<PutStartRequest>(body);
  Try<PutStartReply>(body);
  Try<KeyGenRequest>(body);
  Try<BatchStatusReply>(body);
  Try<KeysRequest>(body);
  Try<GetReply>(body);
  Try<ListRequest>(body);
  Try<ListReply>(body);
  Try<SegmentsRequest>(body);
  Try<SegmentsReply>(body);
  Try<CopyStartRequest>(body);
  Try<CopyStartReply>(body);
  Try<CopyEndRequest>(body);
  Try<FetchRequest>(body);
  Try<PushRequest>(body);
  Try<PushReply>(body);
  Try<ReadRequest>(body);
  Try<ReadReply>(body);
  Try<WriteRequest>(body);
  Try<LookupPrefixRequest>(body);
  Try<LookupPrefixReply>(body);
  Try<InventorySyncRequest>(body);
  Try<InventorySyncReply>(body);
  Try<InventoryReportRequest>(body);
  Try<InventoryReportReply>(body);
}

// Decodes the body as the message(s) the header's type names, as the servers and the client do.
void Dispatch(uint16_t type, absl::string_view body) {
  (void)MsgTypeName(type);
  const bool reply = (type & kReplyBit) != 0;
  const auto t = static_cast<MsgType>(type & ~kReplyBit);
  if (reply) Try<StatusReply>(body);  // any failed request is answered with a StatusReply
  switch (t) {
    case MsgType::kHello:
      reply ? Try<HelloReply>(body) : Try<HelloRequest>(body);
      break;
    case MsgType::kHeartbeat:
      reply ? Try<HeartbeatReply>(body) : Try<HeartbeatRequest>(body);
      break;
    case MsgType::kMountSegment:
      reply ? Try<MountSegmentReply>(body) : Try<MountSegmentRequest>(body);
      break;
    case MsgType::kUnmountSegment:
      reply ? Try<StatusReply>(body) : Try<UnmountSegmentRequest>(body);
      break;
    case MsgType::kPutStart:
      reply ? Try<PutStartReply>(body) : Try<PutStartRequest>(body);
      break;
    case MsgType::kPutEnd:
    case MsgType::kPutRevoke:
    case MsgType::kGetEnd:
      reply ? Try<BatchStatusReply>(body) : Try<KeyGenRequest>(body);
      break;
    case MsgType::kGet:
      reply ? Try<GetReply>(body) : Try<KeysRequest>(body);
      break;
    case MsgType::kExist:
      reply ? Try<BatchStatusReply>(body) : Try<KeysRequest>(body);
      break;
    case MsgType::kRemove:
      reply ? Try<BatchStatusReply>(body) : Try<RemoveRequest>(body);
      break;
    case MsgType::kList:
      reply ? Try<ListReply>(body) : Try<ListRequest>(body);
      break;
    case MsgType::kSegments:
      reply ? Try<SegmentsReply>(body) : Try<SegmentsRequest>(body);
      break;
    case MsgType::kCopyStart:
    case MsgType::kMoveStart:
      reply ? Try<CopyStartReply>(body) : Try<CopyStartRequest>(body);
      break;
    case MsgType::kCopyEnd:
    case MsgType::kMoveEnd:
    case MsgType::kCopyRevoke:
    case MsgType::kMoveRevoke:
      reply ? Try<BatchStatusReply>(body) : Try<CopyEndRequest>(body);
      break;
    case MsgType::kFetch:
      reply ? Try<StatusReply>(body) : Try<FetchRequest>(body);
      break;
    case MsgType::kLookupPrefix:
      reply ? Try<LookupPrefixReply>(body) : Try<LookupPrefixRequest>(body);
      break;
    case MsgType::kPush:
      reply ? Try<PushReply>(body) : Try<PushRequest>(body);
      break;
    case MsgType::kRead:
      reply ? Try<ReadReply>(body) : Try<ReadRequest>(body);
      break;
    case MsgType::kWrite:
      reply ? Try<StatusReply>(body) : Try<WriteRequest>(body);
      break;
    case MsgType::kInventorySync:
      reply ? Try<InventorySyncReply>(body) : Try<InventorySyncRequest>(body);
      break;
    case MsgType::kInventoryReport:
      reply ? Try<InventoryReportReply>(body) : Try<InventoryReportRequest>(body);
      break;
    case MsgType::kAttach:
      reply ? Try<StatusReply>(body) : Try<AttachRequest>(body);
      break;
    default:  // kStat has no message of its own; unknown types are answered with StatusReply
      break;
  }
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
