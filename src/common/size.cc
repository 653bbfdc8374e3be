#include "common/size.h"

#include <cctype>
#include <cstdio>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace granary::common {

namespace {

constexpr const char* kUnitNames[] = {"B", "KB", "MB", "GB", "TB"};

// The power of two a unit stands for (0 for none or B), or -1 for an unknown unit.
int UnitShift(absl::string_view unit) {
  const std::string lower = absl::AsciiStrToLower(unit);
  if (lower.empty() || lower == "b") return 0;
  if (lower == "kb" || lower == "kib" || lower == "k") return 10;
  if (lower == "mb" || lower == "mib" || lower == "m") return 20;
  if (lower == "gb" || lower == "gib" || lower == "g") return 30;
  if (lower == "tb" || lower == "tib" || lower == "t") return 40;
  return -1;
}

// For a refused "<whole>.<fraction><unit>": " (1.5GB = 1536MB)", the same amount in the largest
// smaller unit it is whole in, or "" when it is not a whole number of bytes (or too long to
// say exactly).
std::string WholeHint(unsigned __int128 whole, absl::string_view fraction, int shift) {
  if (fraction.empty() || fraction.size() > 9 || whole >= (static_cast<uint64_t>(1) << 40)) {
    return "";
  }
  unsigned __int128 den = 1, num = whole;
  for (char c : fraction) {
    den *= 10;
    num = num * 10 + static_cast<unsigned>(c - '0');
  }
  num <<= shift;  // the amount in bytes is num / den; below 2^40 * 10^9 * 2^40 < 2^110
  for (int s = shift - 10; s >= 0; s -= 10) {
    const unsigned __int128 per_unit = den << s;
    if (num % per_unit != 0) continue;
    const unsigned __int128 amount = num / per_unit;
    if (amount > std::numeric_limits<int64_t>::max()) return "";
    return absl::StrCat(" (", static_cast<uint64_t>(whole), ".", fraction, kUnitNames[shift / 10],
                        " = ", static_cast<uint64_t>(amount), kUnitNames[s / 10], ")");
  }
  return "";
}

}  // namespace

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
    if (s[0] == '.') return bad("the number must be whole");
    return bad("does not start with a digit");
  }
  // A decimal point: refused, and the message says so plainly (with the value written in a
  // smaller unit when that is whole), rather than as a unit '.5GB' that does not exist.
  absl::string_view fraction;
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1;
    while (j < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[j]))) ++j;
    fraction = s.substr(i + 1, j - i - 1);
    i = j;
  }
  absl::string_view unit = absl::StripLeadingAsciiWhitespace(s.substr(i));
  const int shift = UnitShift(unit);
  if (shift < 0) return bad(absl::StrCat("unknown unit '", unit, "'"));
  if (fraction.data() != nullptr) {
    return bad(absl::StrCat("the number must be whole", WholeHint(value, fraction, shift)));
  }
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
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0 || v == static_cast<double>(static_cast<uint64_t>(v))) {
    snprintf(buf, sizeof(buf), "%.0f %s", v, kUnitNames[u]);
  } else {
    snprintf(buf, sizeof(buf), "%.2f %s", v, kUnitNames[u]);
  }
  return buf;
}

}  // namespace granary::common
