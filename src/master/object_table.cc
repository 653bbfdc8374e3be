#include "master/object_table.h"

#include <cstring>
#include <memory>

#include "common/log.h"

namespace granary::master {
namespace {

// Compaction runs when dead key bytes exceed both the live ones and this floor, so that each
// dead byte is copied O(1) times and small tables never compact.
constexpr uint64_t kCompactFloorBytes = 1 << 20;

}  // namespace

ObjectTable::ObjectTable() : index_(0, Hash{this}, Eq{this}) {}

uint32_t ObjectTable::NewSlot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  GRANARY_CHECK(slots_used_ < UINT32_MAX) << "object table shard is full (2^32 slots)";
  if (slots_used_ % kSlotsPerChunk == 0) {
    slot_chunks_.push_back(std::make_unique<Slot[]>(kSlotsPerChunk));
  }
  return slots_used_++;
}

uint32_t ObjectTable::StoreKey(absl::string_view key) {
  GRANARY_CHECK(key.size() <= kMaxKeyBytes) << "table key of " << key.size() << " bytes";
  if (kKeyChunkBytes - key_tail_ < key.size()) {
    GRANARY_CHECK(key_chunks_.size() < UINT32_MAX / kKeyChunkBytes)
        << "object table shard's key arena is full (4 GiB)";
    // make_unique_for_overwrite: the bytes are written before they are read, and untouched
    // pages stay out of the resident set.
    key_chunks_.push_back(std::make_unique_for_overwrite<char[]>(kKeyChunkBytes));
    key_tail_ = 0;
  }
  const uint32_t pos = static_cast<uint32_t>((key_chunks_.size() - 1) * kKeyChunkBytes + key_tail_);
  if (!key.empty()) std::memcpy(key_chunks_.back().get() + key_tail_, key.data(), key.size());
  key_tail_ += static_cast<uint32_t>(key.size());
  live_key_bytes_ += key.size();
  return pos;
}

void ObjectTable::CompactKeys() {
  std::vector<std::unique_ptr<char[]>> old = std::move(key_chunks_);
  key_chunks_.clear();
  key_tail_ = kKeyChunkBytes;
  live_key_bytes_ = 0;
  dead_key_bytes_ = 0;
  for (uint32_t slot : index_) {
    Slot& s = SlotAt(slot);
    const absl::string_view key(old[s.key_pos / kKeyChunkBytes].get() + s.key_pos % kKeyChunkBytes,
                                s.key_len);
    s.key_pos = StoreKey(key);
  }
}

std::pair<ObjectTable::iterator, bool> ObjectTable::try_emplace(absl::string_view key) {
  if (dead_key_bytes_ > live_key_bytes_ && dead_key_bytes_ > kCompactFloorBytes) CompactKeys();
  bool inserted = false;
  auto it = index_.lazy_emplace(key, [&](const Index::constructor& ctor) {
    const uint32_t slot = NewSlot();
    Slot& s = SlotAt(slot);
    s.key_pos = StoreKey(key);
    s.key_len = static_cast<uint32_t>(key.size());
    ctor(slot);
    inserted = true;
  });
  return {iterator(this, it), inserted};
}

void ObjectTable::erase(iterator it) {
  const uint32_t slot = *it.it_;
  Slot& s = SlotAt(slot);
  index_.erase(it.it_);
  live_key_bytes_ -= s.key_len;
  dead_key_bytes_ += s.key_len;
  // Destroy and rebuild in place: frees a heap-allocated replica list and leaves the default
  // Object that try_emplace hands out when it reuses the slot.
  std::destroy_at(&s.obj);
  std::construct_at(&s.obj);
  s.key_pos = kFreeSlot;
  s.key_len = 0;
  free_slots_.push_back(slot);
}

}  // namespace granary::master
