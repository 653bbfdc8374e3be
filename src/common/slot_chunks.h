#pragma once

// Packing transfers into fixed-size bounce slots (the client's device staging and the node's GPU
// bounce): items are taken in order, an item larger than a slot is split across slots, and
// small ones share a slot. Each chunk fills one slot; all but the last are full.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace granary::common {

// One piece of one item in one slot: item index, offset into the item, length, and where in
// the slot it lies.
struct SlotPart {
  size_t item = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  size_t slot_offset = 0;
};

// The chunks (one per slot, in order) for items of `lengths` bytes; empty items take no part.
// slot_bytes > 0.
inline std::vector<std::vector<SlotPart>> PackIntoSlots(const std::vector<uint64_t>& lengths,
                                                        size_t slot_bytes) {
  std::vector<std::vector<SlotPart>> chunks(1);
  size_t fill = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    for (uint64_t off = 0; off < lengths[i];) {
      if (fill == slot_bytes) {
        chunks.emplace_back();
        fill = 0;
      }
      const uint64_t n = std::min<uint64_t>(lengths[i] - off, slot_bytes - fill);
      chunks.back().push_back({i, off, n, fill});
      fill += n;
      off += n;
    }
  }
  if (chunks.back().empty()) chunks.pop_back();
  return chunks;
}

}  // namespace granary::common
