#pragma once

// UTF-8 checks for text that crosses a boundary (tenant ids, admin API fields, listings, metric
// labels). Stateless and thread-safe; each call walks its input once, no allocation except the
// returned string.

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace granary::common {

// The length (1..4) of the well-formed UTF-8 sequence that starts at s[i], or 0 when the byte
// there starts none: a stray continuation byte, an overlong form, a surrogate (U+D800..DFFF), a
// code point above U+10FFFF, or a sequence cut short. Requires i < s.size().
size_t Utf8SequenceLength(absl::string_view s, size_t i);

// The offset of the first byte that is not part of a well-formed sequence; npos when `s` is
// valid UTF-8 (the empty string is).
size_t FirstInvalidUtf8Byte(absl::string_view s);

inline bool IsValidUtf8(absl::string_view s) {
  return FirstInvalidUtf8Byte(s) == absl::string_view::npos;
}

// `s` as text that is always valid UTF-8 and says which bytes it held: valid UTF-8 comes back
// unchanged; otherwise each byte outside a well-formed sequence is written as \xNN and each
// backslash as \\ (so the escaped form of an invalid string never reads as another string's
// unescaped one).
std::string EscapeInvalidUtf8(absl::string_view s);

}  // namespace granary::common
