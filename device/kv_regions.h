#pragma once

// Private to device/ and device/fake/: the validation and chunking of batched-copy region lists,
// which is how the GPU versions run gathers and scatters (kv_layout.h's Append...Regions, one
// batched-copy launch).

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "device/kv_layout.h"

namespace granary::device::internal {

// Checks one batched-copy region list: n >= 0, regions non-null when n > 0, and non-null src
// and dst in every region with bytes > 0 (the message names the region index).
[[nodiscard]] absl::Status ValidateRegions(const CopyRegion* regions, int n);

// The largest piece one GPU thread block copies; bigger regions are split so that one large
// region spreads over many SMs instead of serializing on one.
inline constexpr size_t kMaxChunkBytes = 64 * 1024;

// regions[0..n) split into pieces of at most `max_chunk` bytes (> 0), in order, skipping empty
// regions. Every piece but a region's last starts at a multiple of max_chunk from the region's
// start, so source and destination keep the region's relative alignment. Assumes
// ValidateRegions(regions, n).ok().
std::vector<CopyRegion> SplitIntoChunks(const CopyRegion* regions, size_t n, size_t max_chunk);

}  // namespace granary::device::internal
