#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace granary::master {

// An O(1) offset allocator over [0, capacity): TLSF-style two-level size-class bins with
// bitmaps, first-fit within a class, immediate coalescing of neighbours on Free. It hands out
// offsets only; it never touches the memory they name.
//
// Ownership: one instance per segment, owned by that segment's bookkeeping in the master.
// Thread safety: not thread-safe. The owner serializes every call (const ones included) with
// its own lock.
//
// Layout. Every block (free or allocated) is a node in a pool (std::vector with an index free
// list) and is linked to its address-order neighbours, so Free coalesces in O(1). Free blocks
// also sit in one of kNumBins size-class bins (a doubly linked list per bin); a bin covers the
// sizes [MinSize(b), MinSize(b + 1)): exact for sizes < 16, else the top 5 significant bits
// (16 classes per power of two, <= 6.25% spread). A 64-bit first-level bitmap plus one 16-bit
// second-level bitmap per power of two say which bins are non-empty. An allocation is named by
// its node's index (Allocation::handle), which the owner keeps and passes back to Free: no
// offset index is needed. Memory is 32 bytes per block (live allocation or free block) plus a
// fixed ~4 KB of bins, independent of capacity (2^48 and beyond is fine).
//
// Cost of one call:
//   Allocate: O(1) - two bitmap scans (count-trailing-zeros) find the first non-empty bin whose
//     every block fits the request ("good fit": the request's own class if the request is that
//     class's minimum size, else the class above). Only if no such bin exists, the request's own
//     bin list is scanned first-fit (O(blocks in that one bin)); this keeps a fit from being
//     missed, so Allocate fails iff largest_free_block() < the rounded size. Splitting takes one
//     pool node.
//   Free: O(1) - the handle names the node; at most two merges with address neighbours, one bin
//     insert.
//   No heap allocation per call beyond amortized growth of the node pool.
//
// All offsets are multiples of `alignment` and every allocation's size is rounded up to it.
// If capacity is not a multiple of alignment, the block ending at capacity may have a tail
// smaller than alignment that stays free (it still counts in free_bytes()).
class OffsetAllocator {
 public:
  struct Allocation {
    uint64_t offset = 0;
    uint64_t size = 0;    // Actually reserved (rounded up to alignment).
    uint32_t handle = 0;  // Names the allocation for Free and IsLive.
  };

  // alignment must be a power of two >= 8 (checked).
  explicit OffsetAllocator(uint64_t capacity, uint64_t alignment = 64);

  OffsetAllocator(const OffsetAllocator&) = delete;
  OffsetAllocator& operator=(const OffsetAllocator&) = delete;
  // A moved-from allocator may only be destroyed or assigned to.
  OffsetAllocator(OffsetAllocator&&) = default;
  OffsetAllocator& operator=(OffsetAllocator&&) = default;

  // size 0 -> nullopt; no free block large enough -> nullopt.
  [[nodiscard]] std::optional<Allocation> Allocate(uint64_t size);
  // Reserves exactly [offset, offset + size rounded up): the range a restored object already
  // occupies (a master rebuilding from node inventories). nullopt when offset is not aligned,
  // the range is outside the capacity, or any part of it is not free. O(1) when calls come in
  // ascending offset order (the free tail the previous call left is tried first, which is how
  // the node reports sorted records); otherwise a scan of the node pool, O(blocks).
  [[nodiscard]] std::optional<Allocation> AllocateAt(uint64_t offset, uint64_t size);
  // Reserves every free block as an allocation of its own and returns them (the quarantine of
  // unreported space after a master restart; Free gives each back). O(free blocks).
  std::vector<Allocation> TakeAllFree();
  // a must be a live allocation returned by Allocate (its handle and offset are checked);
  // anything else, a double free included, crashes (GRANARY_CHECK).
  void Free(const Allocation& a);
  // Whether a is still live: its handle names an allocated block at its offset.
  bool IsLive(const Allocation& a) const;

  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t used_bytes() const { return used_bytes_; }
  uint64_t free_bytes() const { return capacity_ - used_bytes_; }
  // O(1) bitmap lookup of the highest non-empty bin plus a scan of that one bin's list.
  uint64_t largest_free_block() const;
  size_t allocation_count() const { return allocation_count_; }
  size_t free_block_count() const { return free_block_count_; }
  // 1 - largest_free_block / free_bytes (0 when free_bytes == 0): exported in metrics.
  double fragmentation() const;

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  static constexpr int kSubBits = 4;  // 16 classes per power of two.
  static constexpr int kSubCount = 1 << kSubBits;
  static constexpr int kFirstCount = 64 - kSubBits + 1;  // 61 first-level classes.
  static constexpr int kNumBins = kFirstCount * kSubCount;

  // 32 bytes: one per block, so one per stored replica in the master.
  struct Node {
    uint64_t offset : 63 = 0;
    uint64_t is_free : 1 = 0;  // In a bin, or released to the node free list (then size 0).
    uint64_t size = 0;
    uint32_t prev_phys = kNil;  // Address-order neighbours (free or allocated).
    uint32_t next_phys = kNil;
    uint32_t prev_free = kNil;  // Bin list links; meaningful only while is_free.
    uint32_t next_free = kNil;
  };
  static_assert(sizeof(Node) == 32);

  // Bin of a block of `size` (> 0): the class whose range contains it (rounds down).
  static int BinOf(uint64_t size);
  // Smallest size that lands in `bin`.
  static uint64_t MinSize(int bin);
  // First non-empty bin >= `bin`, or -1.
  int FindNonEmptyBin(int bin) const;

  uint32_t NewNode();
  void ReleaseNode(uint32_t index);
  void InsertFree(uint32_t index);
  // Shrinks block `index` (out of the bins) to `rounded` bytes; the rest becomes a free block
  // after it, whose index is returned (kNil when nothing was left over).
  uint32_t SplitTail(uint32_t index, uint64_t rounded);
  void RemoveFree(uint32_t index);

  uint64_t capacity_;
  uint64_t alignment_;
  uint64_t used_bytes_ = 0;
  size_t free_block_count_ = 0;
  size_t allocation_count_ = 0;

  // A deque, not a vector: it grows in small blocks (no doubling), so a table of millions of
  // allocations costs 32 bytes per node rather than up to 64 (measured by bench/master_memory.sh).
  std::deque<Node> nodes_;
  uint32_t node_free_list_ = kNil;  // Released nodes, chained through next_phys.
  uint32_t at_hint_ = kNil;         // The free tail the last AllocateAt left (may be stale).

  uint64_t first_bitmap_ = 0;                       // Bit f: sub_bitmap_[f] != 0.
  std::array<uint16_t, kFirstCount> sub_bitmap_{};  // Bit s: bins_[f * 16 + s] non-empty.
  std::array<uint32_t, kNumBins> bins_;             // Head node per bin, kNil if empty.
};

}  // namespace granary::master
