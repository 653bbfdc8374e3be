#include "master/offset_allocator.h"

#include <bit>
#include <limits>

#include "common/log.h"

namespace granary::master {

OffsetAllocator::OffsetAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity), alignment_(alignment) {
  GRANARY_CHECK(alignment >= 8 && std::has_single_bit(alignment))
      << "alignment must be a power of two >= 8, got " << alignment;
  GRANARY_CHECK(capacity < (uint64_t{1} << 63)) << "capacity must be below 2^63, got " << capacity;
  bins_.fill(kNil);
  if (capacity_ == 0) return;
  const uint32_t first = NewNode();
  nodes_[first].offset = 0;
  nodes_[first].size = capacity_;
  InsertFree(first);
}

// Sizes < 16 get one bin each; larger ones are classed by their floor(log2) and the next
// kSubBits bits below the leading one. The mapping is monotonic and contiguous.
int OffsetAllocator::BinOf(uint64_t size) {
  if (size < kSubCount) return static_cast<int>(size);
  const int log2 = std::bit_width(size) - 1;  // >= kSubBits.
  const int shift = log2 - kSubBits;
  const int sub = static_cast<int>((size >> shift) & (kSubCount - 1));
  return (shift + 1) * kSubCount + sub;
}

uint64_t OffsetAllocator::MinSize(int bin) {
  if (bin < kSubCount) return static_cast<uint64_t>(bin);
  const int shift = bin / kSubCount - 1;
  return (uint64_t{kSubCount} + static_cast<uint64_t>(bin % kSubCount)) << shift;
}

int OffsetAllocator::FindNonEmptyBin(int bin) const {
  if (bin >= kNumBins) return -1;
  const int first = bin / kSubCount;
  const uint32_t sub_mask = sub_bitmap_[first] & (~uint32_t{0} << (bin % kSubCount));
  if (sub_mask != 0) return first * kSubCount + std::countr_zero(sub_mask);
  // first + 1 <= kFirstCount = 61 < 64, so the shift is defined.
  const uint64_t first_mask = first_bitmap_ & (~uint64_t{0} << (first + 1));
  if (first_mask == 0) return -1;
  const int f = std::countr_zero(first_mask);
  return f * kSubCount + std::countr_zero(static_cast<uint32_t>(sub_bitmap_[f]));
}

uint32_t OffsetAllocator::NewNode() {
  if (node_free_list_ != kNil) {
    const uint32_t index = node_free_list_;
    node_free_list_ = nodes_[index].next_phys;
    nodes_[index] = Node();
    return index;
  }
  GRANARY_CHECK(nodes_.size() < kNil) << "offset allocator node pool exhausted";
  nodes_.emplace_back();
  return static_cast<uint32_t>(nodes_.size() - 1);
}

void OffsetAllocator::ReleaseNode(uint32_t index) {
  // Free and of size 0: never a live allocation (IsLive), never in a bin.
  nodes_[index].is_free = 1;
  nodes_[index].size = 0;
  nodes_[index].next_phys = node_free_list_;
  node_free_list_ = index;
}

void OffsetAllocator::InsertFree(uint32_t index) {
  Node& node = nodes_[index];
  const int bin = BinOf(node.size);
  node.is_free = 1;
  node.prev_free = kNil;
  node.next_free = bins_[bin];
  if (node.next_free != kNil) nodes_[node.next_free].prev_free = index;
  bins_[bin] = index;
  sub_bitmap_[bin / kSubCount] |= static_cast<uint16_t>(1u << (bin % kSubCount));
  first_bitmap_ |= uint64_t{1} << (bin / kSubCount);
  ++free_block_count_;
}

void OffsetAllocator::RemoveFree(uint32_t index) {
  Node& node = nodes_[index];
  const int bin = BinOf(node.size);
  if (node.prev_free != kNil) {
    nodes_[node.prev_free].next_free = node.next_free;
  } else {
    bins_[bin] = node.next_free;
  }
  if (node.next_free != kNil) nodes_[node.next_free].prev_free = node.prev_free;
  if (bins_[bin] == kNil) {
    const int first = bin / kSubCount;
    sub_bitmap_[first] &= static_cast<uint16_t>(~(1u << (bin % kSubCount)));
    if (sub_bitmap_[first] == 0) first_bitmap_ &= ~(uint64_t{1} << first);
  }
  node.is_free = 0;
  node.prev_free = node.next_free = kNil;
  --free_block_count_;
}

uint32_t OffsetAllocator::SplitTail(uint32_t index, uint64_t rounded) {
  if (nodes_[index].size <= rounded) return kNil;
  // nodes_ is a deque: the references survive NewNode.
  const uint32_t tail = NewNode();
  Node& head = nodes_[index];
  Node& rest = nodes_[tail];
  rest.offset = head.offset + rounded;
  rest.size = head.size - rounded;
  rest.prev_phys = index;
  rest.next_phys = head.next_phys;
  if (head.next_phys != kNil) nodes_[head.next_phys].prev_phys = tail;
  head.next_phys = tail;
  head.size = rounded;
  InsertFree(tail);
  return tail;
}

std::optional<OffsetAllocator::Allocation> OffsetAllocator::Allocate(uint64_t size) {
  if (size == 0 || size > capacity_) return std::nullopt;
  // size <= capacity_ <= 2^64 - 1; rounding up can still overflow for sizes near 2^64.
  if (size > std::numeric_limits<uint64_t>::max() - (alignment_ - 1)) return std::nullopt;
  const uint64_t rounded = (size + alignment_ - 1) & ~(alignment_ - 1);
  if (rounded > capacity_ - used_bytes_) return std::nullopt;

  // Good fit: every block in a bin >= `start` is at least `rounded` bytes.
  const int own_bin = BinOf(rounded);
  const int start = MinSize(own_bin) == rounded ? own_bin : own_bin + 1;
  uint32_t index = kNil;
  const int bin = FindNonEmptyBin(start);
  if (bin >= 0) {
    index = bins_[bin];
  } else if (start != own_bin) {
    // Fallback: first fit within the request's own class (blocks there may be too small).
    for (uint32_t i = bins_[own_bin]; i != kNil; i = nodes_[i].next_free) {
      if (nodes_[i].size >= rounded) {
        index = i;
        break;
      }
    }
  }
  if (index == kNil) return std::nullopt;

  RemoveFree(index);
  SplitTail(index, rounded);
  const Node& node = nodes_[index];
  used_bytes_ += rounded;
  ++allocation_count_;
  return Allocation{node.offset, rounded, index};
}

std::optional<OffsetAllocator::Allocation> OffsetAllocator::AllocateAt(uint64_t offset,
                                                                       uint64_t size) {
  if (size == 0 || size > capacity_ || offset % alignment_ != 0) return std::nullopt;
  if (size > std::numeric_limits<uint64_t>::max() - (alignment_ - 1)) return std::nullopt;
  const uint64_t rounded = (size + alignment_ - 1) & ~(alignment_ - 1);
  if (rounded > capacity_ || offset > capacity_ - rounded) return std::nullopt;
  auto holds = [&](uint32_t i) {
    const Node& n = nodes_[i];
    return n.is_free && n.size > 0 && n.offset <= offset && offset - n.offset <= n.size &&
           rounded <= n.size - (offset - n.offset);
  };
  uint32_t index = kNil;
  if (at_hint_ != kNil && at_hint_ < nodes_.size() && holds(at_hint_)) {
    index = at_hint_;
  } else {
    for (uint32_t i = 0; i < nodes_.size(); ++i) {
      if (holds(i)) {
        index = i;
        break;
      }
    }
  }
  if (index == kNil) return std::nullopt;
  RemoveFree(index);
  if (nodes_[index].offset < offset) {
    // The part before the range stays free. nodes_ is a deque: references survive NewNode.
    const uint32_t head = NewNode();
    Node& h = nodes_[head];
    Node& n = nodes_[index];
    h.offset = n.offset;
    h.size = offset - n.offset;
    h.prev_phys = n.prev_phys;
    h.next_phys = index;
    if (n.prev_phys != kNil) nodes_[n.prev_phys].next_phys = head;
    n.prev_phys = head;
    n.size -= h.size;
    n.offset = offset;
    InsertFree(head);
  }
  at_hint_ = SplitTail(index, rounded);
  used_bytes_ += rounded;
  ++allocation_count_;
  return Allocation{offset, rounded, index};
}

std::vector<OffsetAllocator::Allocation> OffsetAllocator::TakeAllFree() {
  std::vector<Allocation> out;
  out.reserve(free_block_count_);
  for (int bin = FindNonEmptyBin(0); bin >= 0; bin = FindNonEmptyBin(0)) {
    const uint32_t index = bins_[bin];
    RemoveFree(index);
    used_bytes_ += nodes_[index].size;
    ++allocation_count_;
    out.push_back(Allocation{nodes_[index].offset, nodes_[index].size, index});
  }
  at_hint_ = kNil;
  return out;
}

bool OffsetAllocator::IsLive(const Allocation& a) const {
  if (a.handle >= nodes_.size()) return false;
  const Node& node = nodes_[a.handle];
  return !node.is_free && node.offset == a.offset;
}

void OffsetAllocator::Free(const Allocation& a) {
  GRANARY_CHECK(IsLive(a)) << "OffsetAllocator::Free of unknown allocation at offset " << a.offset
                           << " (handle " << a.handle << "): not live; double free?";
  uint32_t index = a.handle;
  used_bytes_ -= nodes_[index].size;
  --allocation_count_;

  // Merge with the previous block: it absorbs this one.
  const uint32_t prev = nodes_[index].prev_phys;
  if (prev != kNil && nodes_[prev].is_free) {
    RemoveFree(prev);
    nodes_[prev].size += nodes_[index].size;
    nodes_[prev].next_phys = nodes_[index].next_phys;
    if (nodes_[prev].next_phys != kNil) nodes_[nodes_[prev].next_phys].prev_phys = prev;
    ReleaseNode(index);
    index = prev;
  }
  // Merge with the next block: this one absorbs it.
  const uint32_t next = nodes_[index].next_phys;
  if (next != kNil && nodes_[next].is_free) {
    RemoveFree(next);
    nodes_[index].size += nodes_[next].size;
    nodes_[index].next_phys = nodes_[next].next_phys;
    if (nodes_[index].next_phys != kNil) nodes_[nodes_[index].next_phys].prev_phys = index;
    ReleaseNode(next);
  }
  InsertFree(index);
}

uint64_t OffsetAllocator::largest_free_block() const {
  if (first_bitmap_ == 0) return 0;
  const int first = std::bit_width(first_bitmap_) - 1;
  const int bin = first * kSubCount + std::bit_width(static_cast<uint32_t>(sub_bitmap_[first])) - 1;
  uint64_t largest = 0;
  for (uint32_t i = bins_[bin]; i != kNil; i = nodes_[i].next_free) {
    if (nodes_[i].size > largest) largest = nodes_[i].size;
  }
  return largest;
}

double OffsetAllocator::fragmentation() const {
  const uint64_t free = free_bytes();
  if (free == 0) return 0.0;
  return 1.0 - static_cast<double>(largest_free_block()) / static_cast<double>(free);
}

}  // namespace granary::master
