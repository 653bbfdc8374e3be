#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "master/eviction.h"
#include "master/master_metrics.h"
#include "master/master_options.h"
#include "master/object_shards.h"
#include "master/segment_registry.h"
#include "master/session_table.h"
#include "master/tenant/quota_ledger.h"
#include "master/timer_wheel.h"
#include "proto/messages.h"

namespace granary::master {

// Objects and leases: the put lifecycle (start, end, revoke, deadline), reads and their leases,
// existence, removal, listing and prefix lookup, and dropping the replicas of lost segments. Each
// call acts for a tenant the caller has already resolved from its session.
//
// Owned by MasterService; every pointer given to the constructor must outlive it. Thread-safe.
// Locks: one shard mutex per key at a time (ObjectShards' order: the registry's and the ledger's
// may be taken under it); SessionTable's and the TimerWheel's only with no shard held; the
// Evictor is called with no lock held.
//
// Per request cost: one shard lock per key, O(1) hash lookups, an O(1) allocator call per replica
// on PutStart; List, DropSegments and eviction scan the table (rare).
class ObjectStore {
 public:
  ObjectStore(const MasterOptions& options, common::Clock* clock, MasterCounters* counters,
              ObjectShards* shards, SegmentRegistry* segments, tenant::QuotaLedger* ledger,
              TimerWheel* deadlines, SessionTable* sessions, Evictor* evictor);

  // `sid` is the writer: its death frees the puts it has in flight.
  proto::PutStartReply PutStart(SessionId sid, const std::string& tenant,
                                const proto::PutStartRequest& req);
  proto::BatchStatusReply PutEnd(const std::string& tenant, const proto::KeyGenRequest& req);
  proto::BatchStatusReply PutRevoke(const std::string& tenant, const proto::KeyGenRequest& req);
  proto::GetReply Get(const std::string& tenant, const proto::GetRequest& req);
  proto::BatchStatusReply GetEnd(const std::string& tenant, const proto::KeyGenRequest& req);
  proto::BatchStatusReply Exist(const std::string& tenant, const proto::KeysRequest& req);
  proto::BatchStatusReply Remove(const std::string& tenant, const proto::RemoveRequest& req);
  proto::ListReply List(const std::string& tenant, const proto::ListRequest& req) const;
  proto::LookupPrefixReply LookupPrefix(const std::string& tenant,
                                        const proto::LookupPrefixRequest& req);

  // Ends a put in progress if it still matches generation. Returns whether it did.
  bool AbortPut(const std::string& table_key, uint64_t generation, const char* why);
  // A writer's session ended: frees its puts still in progress on these table keys.
  void FreeInFlight(SessionId sid, const std::vector<std::string>& table_keys);
  // Unmounts segments and drops the replicas on them; objects left with none are lost.
  // Returns the generations of the complete objects that had a replica there: what the node
  // held as far as this master knows (InventoryRestore::ExpectOnly, when it comes back).
  absl::flat_hash_set<uint64_t> DropSegments(const std::vector<uint64_t>& segment_ids);
  // Objects in the table, and those with a put in progress.
  void Count(uint64_t* objects, uint64_t* processing) const;

 private:
  // Starts loading the object-index lines of a batch's keys (key_of(i), i < n) before the
  // batch looks them up one by one: each lookup in a table of millions otherwise waits on its
  // own cache misses in the index; prefetched, a batch's misses overlap.
  template <typename KeyOf>
  void PrefetchBatch(const std::string& tenant, size_t n, KeyOf key_of);
  [[nodiscard]] static absl::Status CheckPutEntry(const proto::PutStartEntry& e);
  // Inserts a put in progress unless another writer got there first.
  bool InsertProcessing(const std::string& table_key, SessionId sid, uint64_t generation,
                        int64_t now, const proto::PutStartEntry& e, uint32_t flags,
                        const Placements& placed);

  const MasterOptions& options_;
  common::Clock* clock_;
  MasterCounters* counters_;
  ObjectShards* shards_;
  SegmentRegistry* segments_;
  tenant::QuotaLedger* ledger_;
  TimerWheel* deadlines_;
  SessionTable* sessions_;
  Evictor* evictor_;
};

}  // namespace granary::master
