#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"
#include "common/util.h"
#include "master/object.h"
#include "master/object_table.h"
#include "master/segment_registry.h"

namespace granary::master {

class InventoryOutbox;

// The master's object table: kShards ObjectTables, each behind its own mutex, plus the two
// counters that order its objects (generations and LRU access ordinals). Keys are table keys:
// tenant + '\0' + key (TableKey).
//
// Owned by MasterService and shared by pointer with ObjectStore, Evictor and CopyCoordinator,
// which all outlive no longer than it. Thread-safe: a shard's table is read and written only
// under that shard's mutex, and at most one shard's mutex is held at a time. Lock order: a
// shard's mutex is taken after Evictor's round mutex and before CopyCoordinator's, the
// SegmentRegistry's and the QuotaLedger's (all leaves); never with SessionTable's.
//
// Cost: ShardOf is one hash of the key; the counters are one relaxed atomic add each.
class ObjectShards {
 public:
  static constexpr size_t kShards = 64;
  struct Shard {
    mutable granary::common::Mutex mu;
    ObjectTable objects ABSL_GUARDED_BY(mu);
    // How many of `objects` are kProcessing, kept as they change (so that /metrics never walks
    // the table): +1 at InsertProcessing, -1 when PutEnd completes one or one is erased.
    uint64_t processing ABSL_GUARDED_BY(mu) = 0;
  };

  // Generations are unique across master restarts: `wall_ms` (wall-clock milliseconds at start)
  // in the high bits. With HA, BeginTerm replaces that with the election term.
  explicit ObjectShards(uint64_t wall_ms)
      : first_generation_(wall_ms << 20), next_generation_(wall_ms << 20) {}

  // HA: generations are term << kTermShift | counter from now on, so a new leader's grants
  // always outrank an older leader's (never lower than any generation seen so far). Called
  // once the master is elected, before it admits a put.
  static constexpr int kTermShift = 44;
  void BeginTerm(uint64_t term) {
    const uint64_t base = term << kTermShift;
    first_generation_.store(base);
    RaiseTo(next_generation_, base);
  }

  Shard& ShardOf(absl::string_view table_key) { return shards_[ShardIndexOf(table_key)]; }
  // The top 6 bits of the key's absl hash: the shard's index (absl::flat_hash_set) takes its
  // 7-bit tag from the low bits and its position from the bits above them, so the keys of one
  // shard still spread over every tag. (A byte-at-a-time FNV-1a here took 8% of the master's
  // time under the meta benchmark; absl's hash reads the key 8 bytes at a time.)
  static size_t ShardIndexOf(absl::string_view table_key) {
    static_assert(kShards == 64);
    return absl::Hash<absl::string_view>{}(table_key) >> 58;
  }
  const Shard& ShardOf(absl::string_view table_key) const {
    return shards_[ShardIndexOf(table_key)];
  }
  Shard& shard(size_t i) { return shards_[i]; }
  const Shard& shard(size_t i) const { return shards_[i]; }

  uint64_t NextGeneration() { return next_generation_.fetch_add(1); }
  // The first generation this master could grant: a lower one was granted by a previous master
  // (a put in flight across a restart).
  uint64_t first_generation() const { return first_generation_.load(); }
  // Orders accesses for LRU; a millisecond clock would tie accesses within one millisecond.
  uint64_t NextAccess() { return access_clock_.fetch_add(1, std::memory_order_relaxed) + 1; }
  // Restore: later grants and accesses order after every restored generation and ordinal.
  void RaiseGeneration(uint64_t at_least) { RaiseTo(next_generation_, at_least); }
  void RaiseAccessClock(uint64_t at_least) { RaiseTo(access_clock_, at_least); }

  // Where commit and free records go (null: nowhere, as in tests of one part). Set by the
  // owner before the table is shared.
  void set_outbox(InventoryOutbox* outbox) { outbox_ = outbox; }
  InventoryOutbox* outbox() const { return outbox_; }

 private:
  static void RaiseTo(std::atomic<uint64_t>& a, uint64_t v) {
    uint64_t cur = a.load();
    while (cur < v && !a.compare_exchange_weak(cur, v)) {
    }
  }
  std::array<Shard, kShards> shards_;
  std::atomic<uint64_t> first_generation_;
  InventoryOutbox* outbox_ = nullptr;
  std::atomic<uint64_t> next_generation_;
  std::atomic<uint64_t> access_clock_{0};
};

// tenant + '\0' + key: tenant ids cannot contain '\0', so tenants never share a table key.
std::string TableKey(const std::string& tenant, const std::string& key);
// The same into *out, reusing its buffer.
void TableKeyInto(const std::string& tenant, const std::string& key, std::string* out);
// The tenant part of a table key.
std::string TenantOfKey(absl::string_view table_key);
// Bytes one replica of a value of this size occupies: header + value, aligned.
uint64_t AllocBytes(uint64_t value_size);
// Bytes reserved by a set of placements.
uint64_t PlacedBytes(const Placements& ps);

}  // namespace granary::master
