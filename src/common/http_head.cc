#include "common/http_head.h"

#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace granary::http {

namespace {

bool IsBodyMethod(absl::string_view m) { return m == "POST" || m == "PUT" || m == "PATCH"; }

// A header value or token as a message shows it: at most 64 bytes, escaped.
std::string Shown(absl::string_view v) {
  const bool cut = v.size() > 64;
  std::string out = absl::CHexEscape(v.substr(0, 64));
  return cut ? out + "..." : out;
}

HeadCheck Refuse(HeadCheck c, int status, absl::string_view reason, std::string message) {
  c.status = status;
  c.reason = std::string(reason);
  c.message = std::move(message);
  return c;
}

}  // namespace

size_t FindHeadEnd(absl::string_view bytes, size_t scanned) {
  const size_t from = scanned > 3 ? scanned - 3 : 0;
  const size_t at = bytes.find("\r\n\r\n", from);
  return at == absl::string_view::npos ? 0 : at + 4;
}

HeadCheck CheckHead(absl::string_view head, uint64_t max_body_bytes) {
  HeadCheck c;
  size_t eol = head.find("\r\n");
  const absl::string_view line = head.substr(0, eol);
  // METHOD SP TARGET SP HTTP/x.y
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == line.npos ? line.npos : line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == line.npos || sp2 == sp1 + 1 ||
      !absl::StartsWith(line.substr(sp2 + 1), "HTTP/")) {
    return Refuse(c, 400, "bad_request",
                  absl::StrCat("malformed request line '", Shown(line), "'"));
  }
  c.method = std::string(line.substr(0, sp1));
  c.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));

  std::optional<std::string> length;
  bool chunked_or_other_coding = false;
  for (size_t pos = eol + 2; pos < head.size();) {
    const size_t end = head.find("\r\n", pos);
    if (end == head.npos || end == pos) break;  // the blank line
    const absl::string_view h = head.substr(pos, end - pos);
    const size_t colon = h.find(':');
    if (colon != h.npos) {
      const absl::string_view name = h.substr(0, colon);
      const absl::string_view value = absl::StripAsciiWhitespace(h.substr(colon + 1));
      if (absl::EqualsIgnoreCase(name, "Content-Length")) {
        if (length.has_value() && *length != value) {
          return Refuse(c, 400, "bad_length",
                        absl::StrCat("Content-Length given twice ('", Shown(*length), "', '",
                                     Shown(value), "')"));
        }
        length = std::string(value);
      } else if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) {
        chunked_or_other_coding = true;
      } else if (absl::EqualsIgnoreCase(name, "Expect") &&
                 absl::EqualsIgnoreCase(value, "100-continue")) {
        c.expect_begin = pos;
        c.expect_end = end + 2;
      }
    }
    pos = end + 2;
  }
  if (chunked_or_other_coding) {
    return Refuse(c, 411, "no_length",
                  "Transfer-Encoding is not accepted: send the body with a Content-Length");
  }
  if (!length.has_value()) {
    if (IsBodyMethod(c.method)) {
      return Refuse(c, 411, "no_length", absl::StrCat(c.method, " needs a Content-Length"));
    }
    return c;
  }
  const bool digits = !length->empty() && std::all_of(length->begin(), length->end(), [](char ch) {
    return absl::ascii_isdigit(static_cast<unsigned char>(ch));
  });
  if (!digits) {
    return Refuse(c, 400, "bad_length",
                  absl::StrCat("Content-Length '", Shown(*length), "' is not a byte count"));
  }
  // Past 19 digits it may not fit in 64 bits; it is above any limit either way.
  uint64_t n = 0;
  const bool huge = length->size() > 19;
  if (!huge) {
    for (char ch : *length) n = n * 10 + static_cast<uint64_t>(ch - '0');
  }
  if (huge || n > max_body_bytes) {
    return Refuse(c, 413, "body_too_large",
                  absl::StrCat("Content-Length ", Shown(*length), " is above the limit of ",
                               max_body_bytes, " bytes"));
  }
  c.body_bytes = n;
  return c;
}

}  // namespace granary::http
