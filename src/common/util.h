#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace granary::common {

// 128 random bits as 32 hex characters.
std::string RandomId();

struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const;
};

// "host:port" or "[v6]:port". Names the bad value in the error.
[[nodiscard]] absl::StatusOr<HostPort> ParseHostPort(absl::string_view text);

// This machine's identity for "same host" decisions: GRANARY_HOST_ID when set and non-empty
// (the multi-host test harness gives each network namespace its own, since they share one
// kernel), else the kernel boot id (shared by every process and container on one host), or the
// hostname if that is unreadable.
const std::string& HostId();

// Wall-clock milliseconds since the Unix epoch (commit times in inventory records; ids that
// must differ across restarts). Not for intervals: use the monotonic Clock.
uint64_t WallMs();

// 64-bit FNV-1a, used for the key hash in allocation headers (not for security).
uint64_t HashBytes(absl::string_view data, uint64_t seed = 0);

}  // namespace granary::common
