#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "master/object.h"

namespace granary::master {

// One shard's object table: table key -> Object, laid out for millions of keys. A map of
// std::string to Object costs ~120-byte slots at the hash table's load factor plus a heap copy
// of every key longer than 15 bytes; this table keeps
//   - the Objects in fixed chunks of slots (no doubling; a freed slot is reused),
//   - the key bytes in an arena of 64 KiB chunks, compacted when more than half is dead,
//   - and an open-addressing index (absl::flat_hash_set) of 4-byte slot numbers, hashed and
//     compared through the slot's key.
// So a stored object costs sizeof(Slot) (96 bytes) + its key bytes + ~4-9 bytes of index.
//
// The interface is the subset of a map's that the master uses: find, try_emplace, erase(it),
// iteration over (key, Object) pairs. Iterators stay valid across erase of other elements (so
// `erase(it++)` works while iterating) and are invalidated by try_emplace. Keys returned as
// string_views are invalidated by try_emplace (it may compact the arena).
// Thread safety: none; the shard's mutex serializes every call.
class ObjectTable {
 public:
  ObjectTable();
  ObjectTable(const ObjectTable&) = delete;
  ObjectTable& operator=(const ObjectTable&) = delete;

  // The longest key the arena takes (a table key: tenant, separator, key).
  static constexpr size_t kMaxKeyBytes = 16 * 1024;

 private:
  // key_pos of a slot that holds no element (erased, on free_slots_). The arena stops short of
  // it (StoreKey).
  static constexpr uint32_t kFreeSlot = UINT32_MAX;
  struct Slot {
    Object obj;
    uint32_t key_pos = kFreeSlot;  // chunk * kKeyChunkBytes + offset in key_chunks_
    uint32_t key_len = 0;
  };
  static constexpr uint32_t kSlotsPerChunk = 1024;
  static constexpr uint32_t kKeyChunkBytes = 64 * 1024;
  static_assert(kMaxKeyBytes <= kKeyChunkBytes);

  struct Hash {
    using is_transparent = void;
    const ObjectTable* table;
    size_t operator()(uint32_t slot) const { return (*this)(table->KeyOf(slot)); }
    size_t operator()(absl::string_view key) const { return absl::Hash<absl::string_view>{}(key); }
  };
  struct Eq {
    using is_transparent = void;
    const ObjectTable* table;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t a, absl::string_view b) const { return table->KeyOf(a) == b; }
    bool operator()(absl::string_view a, uint32_t b) const { return a == table->KeyOf(b); }
  };

  using Index = absl::flat_hash_set<uint32_t, Hash, Eq>;

 public:
  template <bool kConst>
  class Iter {
   public:
    using ObjectRef = std::conditional_t<kConst, const Object&, Object&>;
    struct Ref {
      absl::string_view first;
      ObjectRef second;
    };
    struct Arrow {
      Ref ref;
      const Ref* operator->() const { return &ref; }
    };
    Ref operator*() const { return Ref{table_->KeyOf(*it_), table_->SlotAt(*it_).obj}; }
    Arrow operator->() const { return Arrow{**this}; }
    Iter& operator++() {
      ++it_;
      return *this;
    }
    Iter operator++(int) {
      Iter old = *this;
      ++it_;
      return old;
    }
    bool operator==(const Iter& o) const { return it_ == o.it_; }

   private:
    friend class ObjectTable;
    using TablePtr = std::conditional_t<kConst, const ObjectTable*, ObjectTable*>;
    Iter(TablePtr table, Index::const_iterator it) : table_(table), it_(it) {}
    TablePtr table_;
    Index::const_iterator it_;
  };
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;

  size_t size() const { return index_.size(); }
  bool empty() const { return index_.empty(); }
  iterator begin() { return iterator(this, index_.begin()); }
  iterator end() { return iterator(this, index_.end()); }
  const_iterator begin() const { return const_iterator(this, index_.begin()); }
  const_iterator end() const { return const_iterator(this, index_.end()); }

  iterator find(absl::string_view key) { return iterator(this, index_.find(key)); }
  const_iterator find(absl::string_view key) const {
    return const_iterator(this, index_.find(key));
  }
  // The element with this key, inserted with a default Object if absent; second is whether it
  // was inserted. key must be at most kMaxKeyBytes long.
  std::pair<iterator, bool> try_emplace(absl::string_view key);
  // Removes the element; other iterators stay valid.
  void erase(iterator it);
  // Starts loading where the index would look for key (a lookup soon after misses no cache).
  void prefetch(absl::string_view key) const { index_.prefetch(key); }
  // Makes room for n elements in all, so that inserting up to n rehashes nothing (a restore
  // that knows its size). Invalidates iterators. (Slot chunks are not mapped ahead: a
  // MAP_POPULATE slab measured slower than the page faults it saves.)
  void reserve(size_t n) {
    index_.reserve(n);
    slot_chunks_.reserve((n + kSlotsPerChunk - 1) / kSlotsPerChunk);
  }

  // Calls f(slot, key, object) for every element, in slot order: the Objects are read
  // sequentially from their chunks, not in the index's random order, which is what a scan of
  // the whole table (eviction) wants. f must not insert or erase.
  template <typename F>
  void ForEachSlot(F&& f) const {
    for (uint32_t slot = 0; slot < slots_used_; ++slot) {
      const Slot& s = SlotAt(slot);
      if (s.key_pos != kFreeSlot) f(slot, KeyOf(slot), s.obj);
    }
  }
  // The element ForEachSlot reported in `slot`, or end() when that slot is free now. The slot
  // may hold another key since: the caller recognises its object (its access ordinal, say).
  iterator FindSlot(uint32_t slot) {
    if (slot >= slots_used_ || SlotAt(slot).key_pos == kFreeSlot) return end();
    return iterator(this, index_.find(slot));
  }

  // Bytes of key arena in use, live and dead (for tests and the memory figures).
  uint64_t key_arena_bytes() const { return uint64_t{key_chunks_.size()} * kKeyChunkBytes; }
  uint64_t dead_key_bytes() const { return dead_key_bytes_; }

 private:
  Slot& SlotAt(uint32_t slot) { return slot_chunks_[slot / kSlotsPerChunk][slot % kSlotsPerChunk]; }
  const Slot& SlotAt(uint32_t slot) const {
    return slot_chunks_[slot / kSlotsPerChunk][slot % kSlotsPerChunk];
  }
  absl::string_view KeyOf(uint32_t slot) const {
    const Slot& s = SlotAt(slot);
    return absl::string_view(
        key_chunks_[s.key_pos / kKeyChunkBytes].get() + s.key_pos % kKeyChunkBytes, s.key_len);
  }
  uint32_t NewSlot();
  // Copies key into the arena; returns its position.
  uint32_t StoreKey(absl::string_view key);
  // Rewrites the arena with the live keys only.
  void CompactKeys();

  std::vector<std::unique_ptr<Slot[]>> slot_chunks_;
  std::vector<uint32_t> free_slots_;
  uint32_t slots_used_ = 0;  // slots ever handed out (the high-water mark)

  std::vector<std::unique_ptr<char[]>> key_chunks_;
  uint32_t key_tail_ = kKeyChunkBytes;  // bytes used in the last chunk (full: none yet)
  uint64_t live_key_bytes_ = 0;
  uint64_t dead_key_bytes_ = 0;

  Index index_;
};

}  // namespace granary::master
