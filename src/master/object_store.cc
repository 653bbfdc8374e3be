#include "master/object_store.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/log.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "master/inventory_outbox.h"
#include "proto/alloc_header.h"
#include "proto/disk_layout.h"

namespace granary::master {

namespace {
using proto::WireStatus;

WireStatus Ok() { return WireStatus{}; }
WireStatus Err(const absl::Status& s) { return WireStatus::From(s); }

absl::Status CheckKey(const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("key must not be empty");
  if (key.size() > proto::kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key is ", key.size(), " bytes; the limit is ", proto::kMaxKeyBytes));
  }
  return absl::OkStatus();
}

uint8_t PinOf(uint32_t flags) {
  return (flags & kPutFlagHardPin) ? kPinHard : (flags & kPutFlagSoftPin) ? kPinSoft : kPinNone;
}
}  // namespace

ObjectStore::ObjectStore(const MasterOptions& options, common::Clock* clock,
                         MasterCounters* counters, ObjectShards* shards, SegmentRegistry* segments,
                         tenant::QuotaLedger* ledger, TimerWheel* deadlines, SessionTable* sessions,
                         Evictor* evictor)
    : options_(options),
      clock_(clock),
      counters_(counters),
      shards_(shards),
      segments_(segments),
      ledger_(ledger),
      deadlines_(deadlines),
      sessions_(sessions),
      evictor_(evictor) {}

template <typename KeyOf>
void ObjectStore::PrefetchBatch(const std::string& tenant, size_t n, KeyOf key_of) {
  if (n < 2) return;  // nothing to overlap
  std::string tk;
  for (size_t i = 0; i < n; ++i) {
    TableKeyInto(tenant, key_of(i), &tk);
    ObjectShards::Shard& sh = shards_->ShardOf(tk);
    granary::common::MutexLock lock(&sh.mu);
    sh.objects.prefetch(tk);
  }
}

absl::Status ObjectStore::CheckPutEntry(const proto::PutStartEntry& e) {
  GRANARY_RETURN_IF_ERROR(CheckKey(e.key));
  if (e.size == 0 || e.size > proto::kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("value size ", e.size, " of key ",
                                                   common::QuotedKey(e.key), " is outside 1..",
                                                   proto::kMaxValueBytes));
  }
  return absl::OkStatus();
}

bool ObjectStore::InsertProcessing(const std::string& tk, SessionId sid, uint64_t generation,
                                   int64_t now, const proto::PutStartEntry& e, uint32_t flags,
                                   const Placements& placed) {
  ObjectShards::Shard& sh = shards_->ShardOf(tk);
  granary::common::MutexLock lock(&sh.mu);
  auto [it, fresh] = sh.objects.try_emplace(tk);
  if (!fresh) return false;
  ++sh.processing;
  Object& o = it->second;
  o.size = e.size;
  o.generation = generation;
  o.writer = sid;
  o.created_ms = now;
  o.last_access = shards_->NextAccess();
  o.replicas = placed;
  o.pin = PinOf(flags);
  return true;
}

proto::PutStartReply ObjectStore::PutStart(SessionId sid, const std::string& tenant,
                                           const proto::PutStartRequest& req) {
  proto::PutStartReply rep;
  if (req.replica_num < 1 || req.replica_num > proto::kMaxReplicaNum) {
    rep.status = Err(absl::InvalidArgumentError(
        absl::StrCat("replica_num ", req.replica_num, " is outside 1..", proto::kMaxReplicaNum)));
    return rep;
  }
  if (segments_->totals().segments == 0) {
    // Said per key before admission: with quota on, no capacity would otherwise read as an
    // effective quota of 0 bytes, which sends an operator after the wrong knob.
    const proto::WireStatus none = Err(absl::UnavailableError(
        "no node has mounted a segment yet: start a granary_node against this master, or wait "
        "for one to mount, and retry"));
    rep.results.resize(req.entries.size());
    for (auto& r : rep.results) r.status = none;
    return rep;
  }
  const int64_t now = clock_->NowMs();
  const int64_t deadline = now + options_.put_start_timeout_ms;
  const bool pool_spill = ledger_->PoolSpill(tenant);
  const common::TierPreference tier =
      proto::PutTierOf(req.flags).value_or(ledger_->DefaultTier(tenant));
  rep.results.resize(req.entries.size());
  std::vector<std::string> started;
  PrefetchBatch(tenant, req.entries.size(),
                [&](size_t i) -> const std::string& { return req.entries[i].key; });
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    auto& res = rep.results[i];
    counters_->put_start->Inc();
    if (absl::Status st = CheckPutEntry(e); !st.ok()) {
      res.status = Err(st);
      continue;
    }
    std::string tk = TableKey(tenant, e.key);
    {
      ObjectShards::Shard& sh = shards_->ShardOf(tk);
      granary::common::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it != sh.objects.end()) {
        res.status = Err(absl::AlreadyExistsError(
            it->second.state == ObjectState::kComplete
                ? absl::StrCat("key ", common::QuotedKey(e.key), " already exists")
                : absl::StrCat("key ", common::QuotedKey(e.key), " has a put in progress")));
        continue;
      }
    }
    // A disk tier holds a record per replica (proto/disk_layout.h), which its node reads and
    // writes in one message.
    const bool disk = tier == common::TierPreference::kDisk;
    if (disk && e.size > proto::kMaxDiskValue) {
      res.status = Err(absl::InvalidArgumentError(absl::StrCat(
          "value of key ", common::QuotedKey(e.key), " is ", e.size, " bytes, over the ",
          proto::kMaxDiskValue, " bytes a disk-tier replica holds (one Read or Write message)")));
      continue;
    }
    const uint64_t alloc = disk ? proto::DiskRecordBytes(tenant.size(), e.key.size(), e.size)
                                : proto::kAllocHeaderSize + e.size;
    // Admission: charge the bytes this put will really hold before allocating them.
    const uint64_t charge = (disk ? alloc : AllocBytes(e.size)) * req.replica_num;
    if (absl::Status st = evictor_->ChargeWithTenantEviction(tenant, charge); !st.ok()) {
      res.status = Err(st);
      continue;
    }
    auto placed = evictor_->AllocateForPut(tenant, pool_spill, tier, alloc, req.replica_num);
    if (!placed.ok()) {
      ledger_->Refund(tenant, charge);
      counters_->alloc_failures->Inc();
      res.status = Err(placed.status());
      continue;
    }
    GRANARY_CHECK(PlacedBytes(*placed) == charge) << "allocator and charge disagree";
    const uint64_t gen = shards_->NextGeneration();
    if (!InsertProcessing(tk, sid, gen, now, e, req.flags, *placed)) {
      // Lost a race with another writer of the same key.
      segments_->Free(*placed);
      ledger_->Refund(tenant, charge);
      res.status = Err(absl::AlreadyExistsError(
          absl::StrCat("key ", common::QuotedKey(e.key), " has a put in progress")));
      continue;
    }
    res.generation = gen;
    res.replicas = segments_->Describe(*placed);
    deadlines_->Add(deadline, tk, gen);
    started.push_back(std::move(tk));
  }
  sessions_->AddInFlight(sid, std::move(started));
  return rep;
}

proto::BatchStatusReply ObjectStore::PutEnd(const std::string& tenant,
                                            const proto::KeyGenRequest& req) {
  proto::BatchStatusReply rep;
  rep.results.resize(req.entries.size());
  // Committed keys leave their writer's in-flight set in one pass, under one lock.
  std::vector<std::pair<SessionId, std::string>> committed;
  committed.reserve(req.entries.size());
  PrefetchBatch(tenant, req.entries.size(),
                [&](size_t i) -> const std::string& { return req.entries[i].key; });
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    counters_->put_end->Inc();
    std::string tk = TableKey(tenant, e.key);
    ObjectShards::Shard& sh = shards_->ShardOf(tk);
    absl::Status st;
    SessionId writer = 0;
    int64_t created_ms = 0;
    {
      granary::common::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if ((it == sh.objects.end() || it->second.generation != e.generation) &&
          e.generation < shards_->first_generation()) {
        // Granted by a master that has restarted since: this one never knew the allocation,
        // and its space may be quarantined. A new put is the retry.
        st = absl::UnavailableError(
            absl::StrCat("the put of key ", common::QuotedKey(e.key), " generation ", e.generation,
                         " was started at a master that has restarted since; retry the put"));
      } else if (it == sh.objects.end() || it->second.generation != e.generation) {
        st = absl::NotFoundError(absl::StrCat("no put of key ", common::QuotedKey(e.key),
                                              " generation ", e.generation,
                                              " is in progress (it expired, was revoked, or "
                                              "its node was lost)"));
      } else if (it->second.state == ObjectState::kProcessing) {
        it->second.state = ObjectState::kComplete;
        --sh.processing;
        it->second.last_access = shards_->NextAccess();
        writer = it->second.writer;
        it->second.lease_until_ms = 0;  // the writer's slot now holds the read leases' end
        created_ms = it->second.created_ms;
        // Commit what is still placed (a replica lost meanwhile was refunded already).
        ledger_->Commit(tenant, PlacedBytes(it->second.replicas));
        if (InventoryOutbox* out = shards_->outbox())
          out->Committed(tk, it->second, common::WallMs());
      }
    }
    if (writer != 0) {
      deadlines_->Remove(created_ms + options_.put_start_timeout_ms, e.generation);
      committed.emplace_back(writer, std::move(tk));
    }
    rep.results[i] = st.ok() ? Ok() : Err(st);
  }
  sessions_->ForgetCommitted(committed);
  evictor_->EnforceMaxEntries(tenant);
  return rep;
}

bool ObjectStore::AbortPut(const std::string& tk, uint64_t generation, const char* why) {
  ObjectShards::Shard& sh = shards_->ShardOf(tk);
  Placements freed;
  SessionId writer = 0;
  {
    granary::common::MutexLock lock(&sh.mu);
    auto it = sh.objects.find(tk);
    if (it == sh.objects.end() || it->second.generation != generation ||
        it->second.state != ObjectState::kProcessing) {
      return false;
    }
    freed = it->second.replicas;
    writer = it->second.writer;
    sh.objects.erase(it);
    --sh.processing;
  }
  // Its writes may still land (options.h, aborted_put_hold_ms); its tenant is refunded now.
  segments_->FreeAfter(freed, clock_->NowMs(), options_.AbortedPutHoldMs());
  ledger_->Refund(TenantOfKey(tk), PlacedBytes(freed));
  sessions_->ForgetInFlight(writer, tk);
  GRANARY_LOG_DEBUG << "put aborted (" << why << "), generation " << generation;
  return true;
}

proto::BatchStatusReply ObjectStore::PutRevoke(const std::string& tenant,
                                               const proto::KeyGenRequest& req) {
  proto::BatchStatusReply rep;
  rep.results.resize(req.entries.size());
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    counters_->put_revoke->Inc();
    if (!AbortPut(TableKey(tenant, e.key), e.generation, "revoked")) {
      rep.results[i] =
          Err(absl::NotFoundError(absl::StrCat("no put of key ", common::QuotedKey(e.key),
                                               " generation ", e.generation, " is in progress")));
    }
  }
  return rep;
}

void ObjectStore::FreeInFlight(SessionId sid, const std::vector<std::string>& table_keys) {
  for (const std::string& k : table_keys) {
    // Any generation: the session owned the put in progress on this key.
    ObjectShards::Shard& sh = shards_->ShardOf(k);
    Placements freed;
    {
      granary::common::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(k);
      if (it == sh.objects.end() || it->second.state != ObjectState::kProcessing ||
          it->second.writer != sid) {
        continue;
      }
      freed = it->second.replicas;
      sh.objects.erase(it);
      --sh.processing;
    }
    segments_->FreeAfter(freed, clock_->NowMs(), options_.AbortedPutHoldMs());
    ledger_->Refund(TenantOfKey(k), PlacedBytes(freed));
    counters_->put_revoke->Inc();
  }
}

proto::GetReply ObjectStore::Get(const std::string& tenant, const proto::GetRequest& req) {
  proto::GetReply rep;
  const int64_t now = clock_->NowMs();
  // The lease the client asked for (GetOptions::lease_ms), at most kMaxReadLeaseMs; 0 (and
  // every client older than protocol 14): the configured default.
  const int64_t lease_ms =
      req.lease_ms == 0 ? options_.kv_lease_ttl_ms
                        : static_cast<int64_t>(std::min(req.lease_ms, proto::kMaxReadLeaseMs));
  rep.results.resize(req.keys.size());
  PrefetchBatch(tenant, req.keys.size(),
                [&](size_t i) -> const std::string& { return req.keys[i]; });
  std::string tk;  // reused: one allocation per request, not per key
  for (size_t i = 0; i < req.keys.size(); ++i) {
    const std::string& key = req.keys[i];
    auto& res = rep.results[i];
    counters_->get->Inc();
    TableKeyInto(tenant, key, &tk);
    ObjectShards::Shard& sh = shards_->ShardOf(tk);
    Placements ps;
    {
      granary::common::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it == sh.objects.end() || it->second.state != ObjectState::kComplete) {
        counters_->get_miss->Inc();
        res.status = Err(absl::NotFoundError(
            it == sh.objects.end()
                ? absl::StrCat("key ", common::QuotedKey(key), " not found")
                : absl::StrCat("key ", common::QuotedKey(key), " is still being written")));
        continue;
      }
      Object& o = it->second;
      o.last_access = shards_->NextAccess();
      res.lease_token = static_cast<uint64_t>(TakeLease(o, now, now + lease_ms));
      res.size = o.size;
      res.generation = o.generation;
      res.lease_ms = static_cast<uint32_t>(lease_ms);
      ps = o.replicas;
    }
    res.replicas = segments_->Describe(ps);
  }
  return rep;
}

proto::BatchStatusReply ObjectStore::GetEnd(const std::string& tenant,
                                            const proto::KeyGenRequest& req) {
  proto::BatchStatusReply rep;
  const int64_t now = clock_->NowMs();
  rep.results.resize(req.entries.size());
  PrefetchBatch(tenant, req.entries.size(),
                [&](size_t i) -> const std::string& { return req.entries[i].key; });
  std::string tk;  // reused: one allocation per request, not per key
  for (size_t i = 0; i < req.entries.size(); ++i) {
    const auto& e = req.entries[i];
    TableKeyInto(tenant, e.key, &tk);
    ObjectShards::Shard& sh = shards_->ShardOf(tk);
    granary::common::MutexLock lock(&sh.mu);
    auto it = sh.objects.find(tk);
    if (it == sh.objects.end() || it->second.generation != e.generation) {
      rep.results[i] = Err(absl::NotFoundError(absl::StrCat(
          "key ", common::QuotedKey(e.key), " generation ", e.generation, " not found")));
      continue;
    }
    EndLease(it->second, now, static_cast<int64_t>(e.lease_token));
  }
  return rep;
}

proto::BatchStatusReply ObjectStore::Exist(const std::string& tenant,
                                           const proto::KeysRequest& req) {
  proto::BatchStatusReply rep;
  rep.results.resize(req.keys.size());
  std::string tk;  // reused: one allocation per request, not per key
  for (size_t i = 0; i < req.keys.size(); ++i) {
    TableKeyInto(tenant, req.keys[i], &tk);
    ObjectShards::Shard& sh = shards_->ShardOf(tk);
    granary::common::MutexLock lock(&sh.mu);
    auto it = sh.objects.find(tk);
    if (it == sh.objects.end() || it->second.state != ObjectState::kComplete) {
      rep.results[i] = Err(
          absl::NotFoundError(absl::StrCat("key ", common::QuotedKey(req.keys[i]), " not found")));
    }
  }
  return rep;
}

proto::BatchStatusReply ObjectStore::Remove(const std::string& tenant,
                                            const proto::RemoveRequest& req) {
  proto::BatchStatusReply rep;
  const int64_t now = clock_->NowMs();
  rep.results.resize(req.keys.size());
  std::string tk;  // reused: one allocation per request, not per key
  for (size_t i = 0; i < req.keys.size(); ++i) {
    const std::string& key = req.keys[i];
    counters_->remove->Inc();
    TableKeyInto(tenant, key, &tk);
    ObjectShards::Shard& sh = shards_->ShardOf(tk);
    Placements freed;
    absl::Status st;
    {
      granary::common::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it == sh.objects.end()) {
        st = absl::NotFoundError(absl::StrCat("key ", common::QuotedKey(key), " not found"));
      } else if (it->second.state != ObjectState::kComplete) {
        st = absl::FailedPreconditionError(absl::StrCat(
            "key ", common::QuotedKey(key), " has a put in progress; revoke it or wait"));
      } else if (!req.force && Leased(it->second, now)) {
        st = common::WithReason(absl::FailedPreconditionError(absl::StrCat(
                                    "key ", common::QuotedKey(key), " is being read (lease for ",
                                    it->second.lease_until_ms - now, " ms more); retry later")),
                                ErrorReason::kHasLease);
      } else {
        freed = it->second.replicas;
        if (InventoryOutbox* out = shards_->outbox()) {
          out->Freed(tk, it->second.generation, freed);
        }
        sh.objects.erase(it);
      }
    }
    if (st.ok()) {
      segments_->Free(freed);
      ledger_->Release(tenant, PlacedBytes(freed));
    }
    rep.results[i] = st.ok() ? Ok() : Err(st);
  }
  return rep;
}

proto::ListReply ObjectStore::List(const std::string& tenant, const proto::ListRequest& req) const {
  proto::ListReply rep;
  const int64_t now = clock_->NowMs();
  std::string lo = TableKey(tenant, req.prefix);
  std::string after = TableKey(tenant, req.start_after);
  // The `limit` smallest matching keys, kept in a max-heap of at most limit + 1 entries: a list
  // costs memory for what it returns, not for every key of the tenant. Cost: one heap push
  // (and pop) per matching key, under its shard's lock.
  using Found = std::pair<std::string, proto::ObjectInfo>;
  const auto by_key = [](const Found& a, const Found& b) { return a.first < b.first; };
  std::vector<Found> found;
  found.reserve(std::min<size_t>(req.limit, 1024) + 1);
  bool more = false;
  for (size_t s = 0; s < ObjectShards::kShards; ++s) {
    const ObjectShards::Shard& sh = shards_->shard(s);
    granary::common::MutexLock lock(&sh.mu);
    for (const auto& [tk, o] : sh.objects) {
      if (!absl::StartsWith(tk, lo)) continue;
      if (!req.start_after.empty() && tk <= after) continue;
      if (found.size() == req.limit) {
        more = true;
        if (req.limit == 0 || found.front().first < tk) continue;  // not among the smallest
      }
      proto::ObjectInfo info;
      info.key = std::string(tk.substr(tenant.size() + 1));
      info.size = o.size;
      info.generation = o.generation;
      info.state = o.state;
      info.replica_count = static_cast<uint32_t>(o.replicas.size());
      info.age_ms = static_cast<uint64_t>(std::max<int64_t>(0, now - o.created_ms));
      for (const Placement& p : o.replicas) {
        info.replicas.push_back(proto::ReplicaDesc{p.segment_id, p.offset, p.size});
      }
      found.emplace_back(tk, std::move(info));
      std::push_heap(found.begin(), found.end(), by_key);
      if (found.size() > req.limit) {
        std::pop_heap(found.begin(), found.end(), by_key);
        found.pop_back();
      }
    }
  }
  std::sort_heap(found.begin(), found.end(), by_key);
  rep.more = more;
  for (auto& [tk, info] : found) rep.objects.push_back(std::move(info));
  return rep;
}

proto::LookupPrefixReply ObjectStore::LookupPrefix(const std::string& tenant,
                                                   const proto::LookupPrefixRequest& req) {
  proto::LookupPrefixReply rep;
  const int64_t now = clock_->NowMs();
  std::string tk;  // reused: one allocation per request, not per key
  for (const std::string& key : req.keys) {
    TableKeyInto(tenant, key, &tk);
    ObjectShards::Shard& sh = shards_->ShardOf(tk);
    Placements ps;
    proto::BlockHint hint;
    {
      granary::common::MutexLock lock(&sh.mu);
      auto it = sh.objects.find(tk);
      if (it == sh.objects.end() || it->second.state != ObjectState::kComplete ||
          it->second.replicas.empty()) {
        break;  // the prefix ends at the first missing block
      }
      Object& o = it->second;
      o.last_access = shards_->NextAccess();
      if (req.lease) TakeLease(o, now, now + options_.kv_lease_ttl_ms);  // runs out by itself
      hint.size = o.size;
      hint.generation = o.generation;
      ps = o.replicas;
    }
    if (auto seg = segments_->Find(ps[0].segment_id); seg.has_value()) {
      hint.node_address = seg->node_address;
    }
    rep.hints.push_back(std::move(hint));
  }
  rep.present = static_cast<uint32_t>(rep.hints.size());
  if (req.lease) rep.lease_ms = static_cast<uint32_t>(options_.kv_lease_ttl_ms);
  return rep;
}

absl::flat_hash_set<uint64_t> ObjectStore::DropSegments(const std::vector<uint64_t>& ids) {
  absl::flat_hash_set<uint64_t> gone(ids.begin(), ids.end());
  absl::flat_hash_set<uint64_t> held;
  for (uint64_t id : ids) {
    segments_->Unmount(id);
    if (InventoryOutbox* out = shards_->outbox()) out->Forget(id);
  }
  uint64_t lost = 0;
  for (size_t s = 0; s < ObjectShards::kShards; ++s) {
    ObjectShards::Shard& sh = shards_->shard(s);
    granary::common::MutexLock lock(&sh.mu);
    for (auto it = sh.objects.begin(); it != sh.objects.end();) {
      Object& o = it->second;
      Placements& r = o.replicas;
      auto end = std::remove_if(r.begin(), r.end(),
                                [&](const Placement& p) { return gone.contains(p.segment_id); });
      uint64_t dropped = 0;
      for (auto p = end; p != r.end(); ++p) dropped += p->size;
      r.erase(end, r.end());
      if (dropped > 0) {
        if (o.state == ObjectState::kComplete) held.insert(o.generation);
        const std::string tenant = TenantOfKey(it->first);
        if (o.state == ObjectState::kProcessing) {
          ledger_->Refund(tenant, dropped);  // its writer's PutEnd commits what is left
        } else if (r.empty()) {
          ledger_->Release(tenant, dropped);
        } else {
          ledger_->ReleaseBytes(tenant, dropped);  // one replica fewer, same entry
        }
      }
      if (r.empty()) {
        ++lost;
        if (o.state == ObjectState::kProcessing) --sh.processing;
        sh.objects.erase(it++);
      } else {
        ++it;
      }
    }
  }
  if (lost > 0) {
    counters_->lost->Inc(lost);
    GRANARY_LOG_WARN << lost << " object(s) lost with their only replica(s)";
  }
  return held;
}

void ObjectStore::Count(uint64_t* objects, uint64_t* processing) const {
  for (size_t s = 0; s < ObjectShards::kShards; ++s) {
    const ObjectShards::Shard& sh = shards_->shard(s);
    granary::common::MutexLock lock(&sh.mu);
    *objects += sh.objects.size();
    *processing += sh.processing;
  }
}

}  // namespace granary::master
