#pragma once

// Keys (and other bytes a client chose) as they go into error messages: control bytes (below
// 0x20, and 0x7f) as escapes (\0, \t, \n, \xNN), bytes outside well-formed UTF-8 as \xNN, and
// everything else as it is. So a NUL or an escape sequence in a key can neither cut nor rewrite
// a message or a terminal line, the message stays valid UTF-8, and a UTF-8 key stays readable:
// the escapes the tenant policy gives tenant ids. Stateless; one allocation (the result).

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/utf8.h"

namespace granary::common {

// `s` with its control bytes and its bytes outside well-formed UTF-8 escaped (no quotes).
inline std::string EscapeUnprintable(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = Utf8SequenceLength(s, i);
    if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\0') {
      out += "\\0";
    } else if (c < 0x20 || c == 0x7f || n == 0) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out.append(s.data() + i, n);
      i += n;
      continue;
    }
    ++i;
  }
  return out;
}

// "'" + EscapeUnprintable(key) + "'": how every error message names a key ("key 'a\x1b'").
inline std::string QuotedKey(absl::string_view key) { return "'" + EscapeUnprintable(key) + "'"; }

}  // namespace granary::common
