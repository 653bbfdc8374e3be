#include "common/size.h"

#include <cctype>
#include <cstdio>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace granary {

absl::StatusOr<uint64_t> ParseSize(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid size '", text, "': ", why, "; expected ", kSizeUnitsHelp));
  };
  if (s.empty()) return bad("empty");
  size_t i = 0;
  unsigned __int128 value = 0;
  while (i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) {
    value = value * 10 + static_cast<unsigned>(s[i] - '0');
    if (value > std::numeric_limits<int64_t>::max()) return bad("larger than 2^63-1 bytes");
    ++i;
  }
  if (i == 0) {
    if (s[0] == '-') return bad("negative");
    return bad("does not start with a digit");
  }
  absl::string_view unit = absl::StripLeadingAsciiWhitespace(s.substr(i));
  std::string lower = absl::AsciiStrToLower(unit);
  int shift = 0;
  if (lower.empty() || lower == "b")
    shift = 0;
  else if (lower == "kb" || lower == "kib" || lower == "k")
    shift = 10;
  else if (lower == "mb" || lower == "mib" || lower == "m")
    shift = 20;
  else if (lower == "gb" || lower == "gib" || lower == "g")
    shift = 30;
  else if (lower == "tb" || lower == "tib" || lower == "t")
    shift = 40;
  else
    return bad(absl::StrCat("unknown unit '", unit, "'"));
  value <<= shift;
  if (value > std::numeric_limits<int64_t>::max()) return bad("larger than 2^63-1 bytes");
  return static_cast<uint64_t>(value);
}

absl::StatusOr<uint64_t> ParsePositiveSize(absl::string_view text) {
  auto v = ParseSize(text);
  if (v.ok() && *v == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid size '", text, "': must be positive; expected ", kSizeUnitsHelp));
  }
  return v;
}

std::string FormatSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0 || v == static_cast<double>(static_cast<uint64_t>(v))) {
    snprintf(buf, sizeof(buf), "%.0f %s", v, kUnits[u]);
  } else {
    snprintf(buf, sizeof(buf), "%.2f %s", v, kUnits[u]);
  }
  return buf;
}

}  // namespace granary
