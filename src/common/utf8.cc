#include "common/utf8.h"

#include "absl/strings/str_format.h"

namespace granary::common {

size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = at(i);
  if (c < 0x80) return 1;
  // The lead byte fixes the length and the range of the second byte (RFC 3629, table 3-7 of
  // the Unicode standard): that range is what rules out overlongs, surrogates and > U+10FFFF.
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;  // 0x80..0xC1 (continuation or overlong lead) and 0xF5..0xFF
  }
  if (s.size() - i < len) return 0;
  if (at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  }
  return len;
}

size_t FirstInvalidUtf8Byte(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return i;
    i += n;
  }
  return absl::string_view::npos;
}

std::string EscapeInvalidUtf8(absl::string_view s) {
  if (IsValidUtf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(s[i]));
      ++i;
    } else if (s[i] == '\\') {
      out += "\\\\";
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace granary::common
