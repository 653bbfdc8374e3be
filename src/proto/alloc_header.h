#pragma once

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace granary::proto {

// The 64-byte header at the start of every allocation in a segment. The writer puts it with the
// value; a reader fetches it with the value and checks it against the descriptor the master
// gave, so a read never returns another object's bytes as this one's.
struct AllocHeader {
  static constexpr uint64_t kMagic = 0x3152484E52524701ULL;  // "\x01GRRNHR1"
  uint64_t magic = kMagic;
  uint64_t generation = 0;
  uint64_t key_hash = 0;
  uint64_t value_length = 0;
  uint64_t reserved[4] = {0, 0, 0, 0};
};
static_assert(sizeof(AllocHeader) == 64);
inline constexpr uint64_t kAllocHeaderSize = sizeof(AllocHeader);

// Checks a header read from a replica. UNAVAILABLE (retryable) on any mismatch: the space was
// freed and reused, or the writer has not finished.
[[nodiscard]] inline absl::Status CheckAllocHeader(const AllocHeader& h, uint64_t generation,
                                                   uint64_t key_hash, uint64_t value_length) {
  if (h.magic != AllocHeader::kMagic || h.generation != generation || h.key_hash != key_hash ||
      h.value_length != value_length) {
    return absl::UnavailableError(
        absl::StrCat("replica header mismatch (expected generation ", generation, ", length ",
                     value_length, "; found generation ", h.generation, ", length ", h.value_length,
                     "): the object changed during the read; retry"));
  }
  return absl::OkStatus();
}

}  // namespace granary::proto

namespace granary::proto {
// Allocations in segments are aligned to this (and so are their sizes).
inline constexpr uint64_t kAllocAlignment = 64;
}  // namespace granary::proto
