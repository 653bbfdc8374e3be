#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace granary::common {

// Sizes everywhere in Granary (flags, policy, client config, CLI) use binary units:
// 1 KB = 1024 B, 1 MB = 1024 KB, 1 GB = 1024 MB, 1 TB = 1024 GB. KiB/MiB/GiB/TiB are accepted
// as synonyms. The number is a non-negative decimal integer; units are case-insensitive and may
// follow a space: "4096", "64KB", "1 GiB". The result must fit in 2^63-1 bytes.
inline constexpr absl::string_view kSizeUnitsHelp =
    "a whole number of bytes with an optional unit B, KB, MB, GB or TB (binary: 1 KB = 1024 B)";

[[nodiscard]] absl::StatusOr<uint64_t> ParseSize(absl::string_view text);

// ParseSize, and also rejects 0.
[[nodiscard]] absl::StatusOr<uint64_t> ParsePositiveSize(absl::string_view text);

// 1536 -> "1.50 KB", 1048576 -> "1 MB" (binary units, as ParseSize reads them).
std::string FormatSize(uint64_t bytes);

}  // namespace granary::common
