#include "proto/frame.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/codec.h"

namespace granary::proto {

std::string VersionRange() {
  return kMinProtocolVersion == kProtocolVersion
             ? absl::StrCat(kProtocolVersion)
             : absl::StrCat(kMinProtocolVersion, " to ", kProtocolVersion);
}

void BeginFrame(const FrameHeader& h, std::string* out) {
  Writer w(out);
  w.U32(kFrameMagic);
  w.U16(h.version);
  w.U16(h.type);
  w.U32(h.flags);
  w.U64(h.request_id);
  w.U32(0);  // body_len, patched by FinishFrame
  w.U64(static_cast<uint64_t>(h.epoch));
}

void SetFrameEpoch(std::string* frame, int64_t epoch) {
  if (frame->size() < kFrameHeaderSize) return;
  std::memcpy(frame->data() + kFrameEpochOffset, &epoch, 8);
}

int64_t FrameEpoch(absl::string_view frame) {
  if (frame.size() < kFrameHeaderSize) return 0;
  int64_t epoch = 0;
  std::memcpy(&epoch, frame.data() + kFrameEpochOffset, 8);
  return epoch;
}

void FinishFrame(std::string* out) {
  uint32_t body_len = static_cast<uint32_t>(out->size() - kFrameHeaderSize);
  std::memcpy(out->data() + 20, &body_len, 4);
}

absl::StatusOr<FrameView> DecodeFrame(absl::string_view data) {
  if (data.size() < kFrameHeaderSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("truncated frame: ", data.size(), " bytes, header needs ", kFrameHeaderSize));
  }
  Reader r(data.substr(0, kFrameHeaderSize));
  uint32_t magic = r.U32("magic");
  FrameView f;
  f.header.version = r.U16("version");
  f.header.type = r.U16("type");
  f.header.flags = r.U32("flags");
  f.header.request_id = r.U64("request_id");
  uint32_t body_len = r.U32("body_len");
  f.header.epoch = static_cast<int64_t>(r.U64("epoch"));
  if (magic != kFrameMagic) {
    return absl::InvalidArgumentError(absl::StrFormat("bad frame magic 0x%08x", magic));
  }
  if (!SpeaksVersion(f.header.version)) {
    return absl::FailedPreconditionError(absl::StrCat("unsupported protocol version ",
                                                      f.header.version, " (this side speaks ",
                                                      VersionRange(), ")"));
  }
  if (body_len > kMaxFrameBody) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame body of ", body_len, " bytes exceeds the limit ", kMaxFrameBody));
  }
  if (data.size() - kFrameHeaderSize != body_len) {
    return absl::InvalidArgumentError(absl::StrCat("frame body_len ", body_len, " but ",
                                                   data.size() - kFrameHeaderSize,
                                                   " bytes follow the header"));
  }
  f.body = data.substr(kFrameHeaderSize);
  return f;
}

}  // namespace granary::proto
