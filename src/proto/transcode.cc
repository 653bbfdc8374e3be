#include "proto/transcode.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "proto/messages.h"

namespace granary::proto {

namespace {

// The frame of header h around m, encoded in h.version.
template <class T>
std::string Frame(const FrameHeader& h, const T& m) {
  std::string out;
  BeginFrame(h, &out);
  Writer w(&out, h.version);
  Encode(m, w);
  FinishFrame(&out);
  return out;
}

template <class T>
absl::StatusOr<std::string> Reencode(const FrameHeader& h, const FrameView& from) {
  absl::StatusOr<T> m = DecodeBody<T>(from.body, from.header.version);
  if (!m.ok()) return m.status();
  return Frame(h, *m);
}

}  // namespace

uint16_t MessageSince(uint16_t type) {
  uint16_t since = 0;
  VisitMessage(type, [&](auto tag) { since = Message<decltype(tag)::value>::kSince; });
  return since;
}

absl::StatusOr<std::string> TranscodeFrame(absl::string_view data, uint16_t version) {
  if (!SpeaksVersion(version)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot transcode a frame to protocol ", version,
                                                   " (this build speaks ", VersionRange(), ")"));
  }
  GRANARY_ASSIGN_OR_RETURN(const FrameView f, DecodeFrame(data));
  if (f.header.version == version) return std::string(data);
  FrameHeader h = f.header;
  h.version = version;
  const bool reply = (h.type & kReplyBit) != 0;
  absl::StatusOr<std::string> out;
  const bool known = VisitMessage(h.type, [&](auto tag) {
    using M = Message<decltype(tag)::value>;
    if (!reply) {
      out = Reencode<typename M::Request>(h, f);
      return;
    }
    Reader r(f.body, f.header.version);
    WireStatus status;
    if (absl::Status st = Decode(r, &status); !st.ok()) {
      out = st;
    } else if (status.code != 0) {
      out = Frame(h, StatusReply{std::move(status)});
    } else {
      out = Reencode<typename M::Reply>(h, f);
    }
  });
  if (!known) {
    std::string same(data);
    std::memcpy(same.data() + 4, &version, 2);  // the header's version
    return same;
  }
  if (!out.ok()) {
    return absl::Status(
        out.status().code(),
        absl::StrCat(MsgTypeName(h.type), reply ? " reply" : " request", " of protocol ",
                     f.header.version, ": ", out.status().message()));
  }
  return out;
}

}  // namespace granary::proto
