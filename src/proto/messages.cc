#include "proto/messages.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "proto/alloc_header.h"

namespace granary::proto {

WireStatus WireStatus::From(const absl::Status& s) {
  WireStatus w;
  w.code = static_cast<uint8_t>(s.code());
  w.message = std::string(s.message().substr(0, kMaxMessageBytes));
  w.reason = ErrorReasonOf(s);
  return w;
}

absl::Status WireStatus::ToStatus() const {
  if (code == 0) return absl::OkStatus();
  auto c = static_cast<absl::StatusCode>(code);
  if (code > static_cast<uint8_t>(absl::StatusCode::kUnauthenticated))
    c = absl::StatusCode::kUnknown;
  return common::WithReason(absl::Status(c, message), reason);
}

uint32_t NodeTransferTimeoutMs(int64_t client_timeout_ms) {
  const int64_t bounded = std::clamp<int64_t>(client_timeout_ms, 0, 2 * kMaxNodeTransferTimeoutMs);
  return static_cast<uint32_t>(std::clamp<int64_t>(bounded * 3 / 4, 1, kMaxNodeTransferTimeoutMs));
}

uint64_t InlineDataBytes(const std::vector<InlineEntry>& entries) {
  uint64_t n = 0;
  for (const auto& e : entries) n += kAllocHeaderSize + e.length;
  return n;
}

namespace {
// Appends a length-prefixed string of `size` bytes that fill writes in place.
void PutFilled(size_t size, absl::FunctionRef<void(char*)> fill, std::string* out) {
  Writer(out).U32(static_cast<uint32_t>(size));
  const size_t at = out->size();
  out->resize(at + size);
  fill(out->data() + at);
}
}  // namespace

// Both write the fields their structs' Fields list (ReadReply: status, data; WriteRequest:
// entries, data, tenant, keys), with data filled in place; codec_test checks that the bytes are the
// same.
std::string EncodeReadReplyFrame(uint16_t type, uint64_t request_id, size_t size,
                                 absl::FunctionRef<void(char*)> fill) {
  std::string out;
  out.reserve(kFrameHeaderSize + 16 + size);
  FrameHeader h;
  h.type = type;
  h.request_id = request_id;
  BeginFrame(h, &out);
  Writer w(&out);
  Encode(WireStatus{}, w);
  PutFilled(size, fill, &out);
  FinishFrame(&out);
  return out;
}
std::string EncodeWriteRequestFrame(const std::vector<InlineEntry>& entries, size_t size,
                                    absl::FunctionRef<void(char*)> fill, const std::string& tenant,
                                    const std::vector<std::string>& keys) {
  std::string out;
  size_t names = 8 + tenant.size();
  for (const std::string& k : keys) names += 4 + k.size();
  out.reserve(kFrameHeaderSize + 8 + 16 * entries.size() + size + names);
  FrameHeader h;
  h.type = static_cast<uint16_t>(MsgType::kWrite);
  BeginFrame(h, &out);
  Writer w(&out);
  PutValue(entries, w);
  PutFilled(size, fill, &out);
  Writer tail(&out);
  PutValue(tenant, tail);
  PutValue(keys, tail);
  FinishFrame(&out);
  return out;
}

}  // namespace granary::proto
