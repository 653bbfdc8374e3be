#pragma once

// What this machine can hold, checked before a host segment is allocated: a segment size comes
// from a flag or from a caller (EmbeddedNode, Python), and a size the machine cannot hold must be
// refused by name, not discovered by filling memory until the kernel kills processes.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace granary::node {

// The machine's memory, from /proc/meminfo.
struct MachineMemory {
  uint64_t physical = 0;   // MemTotal
  uint64_t available = 0;  // MemAvailable: what can be allocated now without swapping
};

// Reads MemTotal and MemAvailable from `meminfo` (tests give a file of their own). INTERNAL
// naming the file when it cannot be read or lacks either line.
[[nodiscard]] absl::StatusOr<MachineMemory> ReadMachineMemory(
    const std::string& meminfo = "/proc/meminfo");

// Whether a host segment of `size` bytes fits `machine`. INVALID_ARGUMENT when it is larger than
// the physical memory (it never can fit), RESOURCE_EXHAUSTED when it is larger than what is
// available now; both name the segment (`what`, such as "host segment host0"), its size and the
// limit, in bytes and in binary units. Pure.
[[nodiscard]] absl::Status CheckHostSegmentFits(const std::string& what, uint64_t size,
                                                const MachineMemory& machine);

}  // namespace granary::node
