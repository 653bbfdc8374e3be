#pragma once

#include <cstdint>

namespace granary::common {

// Whether [addr, addr + len) lies inside [base, base + size), for any inputs: no sum is formed,
// so nothing can wrap around. An empty range inside the span counts as inside.
constexpr bool RangeWithin(uint64_t base, uint64_t size, uint64_t addr, uint64_t len) {
  return addr >= base && len <= size && addr - base <= size - len;
}

// The same for an offset: [offset, offset + len) inside [0, size).
constexpr bool OffsetWithin(uint64_t size, uint64_t offset, uint64_t len) {
  return len <= size && offset <= size - len;
}

}  // namespace granary::common
