#pragma once

// Keys (and other bytes a client chose) as they go into error messages: in single quotes, with
// control bytes (below 0x20, and 0x7f) written as escapes (\0, \t, \n, \xNN) and everything else
// as it is, so that a NUL or an escape sequence in a key cannot cut or rewrite a message or a
// terminal line, and a UTF-8 key stays readable. The same escapes tenant ids get in the tenant
// policy's messages. Stateless; one allocation (the result).

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace granary {

// `s` with its control bytes escaped (no quotes).
inline std::string EscapeControlBytes(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\0') {
      out += "\\0";
    } else if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out += ch;
    }
  }
  return out;
}

// "'" + EscapeControlBytes(key) + "'": how every error message names a key ("key 'a\x1b'").
inline std::string QuotedKey(absl::string_view key) { return "'" + EscapeControlBytes(key) + "'"; }

}  // namespace granary
