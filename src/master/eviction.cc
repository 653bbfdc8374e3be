#include "master/eviction.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/log.h"
#include "common/size.h"
#include "master/inventory_outbox.h"
#include "proto/alloc_header.h"

namespace granary::master {

namespace {

using SegmentIds = absl::flat_hash_set<uint64_t>;

// One scan gathers every evictable object (complete, unleased, not hard-pinned) per tenant, and
// every tenant's bytes. Then victims are taken one at a time, each tenant's oldest access first
// (docs/architecture.md section 4, fair eviction):
//   1. tenants over quota or closed to admission,
//   2. the tenant furthest above its fair share of capacity (capacity / tenants with data),
//   3. global LRU;
// soft-pinned objects only when nothing else is left.
// Cost: the scan reads each shard's objects in slot order (sequential memory) and copies 24
// bytes per candidate, no key; each tenant's candidates form a min-heap (O(n) to build,
// O(log n) per victim), as a round takes only eviction_ratio of capacity. Sorting copies of
// every key made a round over 450k objects long enough to cost a full store's puts a third of
// their rate (bench: 4 KiB put on a fresh vs a full store).
struct Candidate {
  uint64_t last_access;  // a unique ordinal: recognises the object in its slot later
  uint64_t bytes;
  uint32_t shard;
  uint32_t slot;
};
// std::*_heap keep the largest on top: "Later" puts the oldest access there.
bool Later(const Candidate& a, const Candidate& b) { return a.last_access > b.last_access; }

struct TenantState {
  std::vector<Candidate> cands[2];  // [0] unpinned, [1] soft-pinned; heaps, oldest on top
  uint64_t bytes = 0;               // everything the tenant holds (complete objects)
  uint64_t evicted = 0;
  bool favoured = false;
};
using TenantStates = absl::flat_hash_map<std::string, TenantState>;

// Whether an object has a replica on one of `on` (null: on every segment).
bool OnSegments(const Object& o, const SegmentIds* on) {
  if (on == nullptr) return true;
  for (const Placement& p : o.replicas) {
    if (on->contains(p.segment_id)) return true;
  }
  return false;
}

// The scan: every complete object's bytes per tenant and its evictable ones as candidates,
// among the objects with a replica on `on` (null: all). Returns the objects scanned.
uint64_t Scan(ObjectShards& shards, const std::string* only_tenant, const SegmentIds* on,
              int64_t now, TenantStates* tenants) {
  // Consecutive objects mostly belong to one tenant: the last lookup is kept. Only a lookup
  // inserts, and it refreshes the pointer, so the pointer never outlives a rehash.
  std::string last_name;
  TenantState* last = nullptr;
  uint64_t scanned = 0;
  for (uint32_t s = 0; s < ObjectShards::kShards; ++s) {
    ObjectShards::Shard& sh = shards.shard(s);
    granary::common::MutexLock lock(&sh.mu);
    sh.objects.ForEachSlot([&](uint32_t slot, absl::string_view tk, const Object& o) {
      if (o.state != ObjectState::kComplete) return;
      const absl::string_view name = tk.substr(0, tk.find('\0'));
      if (only_tenant != nullptr && (name.size() == tk.size() || name != *only_tenant)) return;
      if (!OnSegments(o, on)) return;
      ++scanned;
      if (last == nullptr || name != last_name) {
        last = &(*tenants)[name];
        last_name.assign(name.data(), name.size());
      }
      const uint64_t b = PlacedBytes(o.replicas);
      last->bytes += b;
      if (o.pin == kPinHard || Leased(o, now)) return;
      last->cands[o.pin == kPinSoft ? 1 : 0].push_back(Candidate{o.last_access, b, s, slot});
    });
  }
  return scanned;
}

// The next victim's tenant for pass `p` (0 unpinned, 1 soft-pinned), or end().
TenantStates::iterator PickTenant(TenantStates& tenants, int p, bool one_tenant,
                                  uint64_t fair_share) {
  auto best = tenants.end();
  int best_rank = 3;
  int64_t best_key = 0;
  for (auto it = tenants.begin(); it != tenants.end(); ++it) {
    const TenantState& ts = it->second;
    if (ts.cands[p].empty()) continue;
    const Candidate& c = ts.cands[p].front();
    int rank;
    int64_t key;  // smaller is better within a rank
    if (!one_tenant && ts.favoured) {
      rank = 0;
      key = static_cast<int64_t>(c.last_access);
    } else if (!one_tenant && ts.bytes > fair_share) {
      rank = 1;
      key = -static_cast<int64_t>(ts.bytes - fair_share);
    } else {
      rank = 2;
      key = static_cast<int64_t>(c.last_access);
    }
    if (rank < best_rank || (rank == best_rank && key < best_key)) {
      best = it;
      best_rank = rank;
      best_key = key;
    }
  }
  return best;
}

}  // namespace

Evictor::Evictor(const MasterOptions& options, common::Clock* clock,
                 common::MetricsRegistry* metrics, MasterCounters* counters, ObjectShards* shards,
                 SegmentRegistry* segments, tenant::QuotaLedger* ledger)
    : options_(options),
      clock_(clock),
      metrics_(metrics),
      counters_(counters),
      shards_(shards),
      segments_(segments),
      ledger_(ledger) {}

uint64_t Evictor::TenantRound(uint64_t cap) const {
  return static_cast<uint64_t>(options_.eviction_ratio * static_cast<double>(cap));
}

absl::Status Evictor::ChargeWithTenantEviction(const std::string& tenant, uint64_t bytes) {
  absl::Status st = ledger_->Charge(tenant, bytes);
  // Over its quota: make room among the tenant's own oldest objects, at most twice. Another
  // tenant's objects are never touched for it.
  for (int attempt = 0; attempt < 2 && !st.ok(); ++attempt) {
    if (ErrorReasonOf(st) != ErrorReason::kQuotaExceeded) break;
    auto snap = ledger_->Snapshot(tenant);
    if (!snap.has_value()) break;
    // An over-quota tenant (its quota was lowered below what it holds) is refused until it is
    // back under (docs/architecture.md section 5; global eviction takes its objects first), and a
    // put larger than the whole quota can never be admitted: evicting for either would only destroy
    // data.
    if (snap->over_quota || bytes > snap->effective_quota_bytes) break;
    uint64_t over = snap->charged_bytes + bytes > snap->effective_quota_bytes
                        ? snap->charged_bytes + bytes - snap->effective_quota_bytes
                        : bytes;
    // A round scans the whole table: free a round's worth (see TenantRound), not one put's.
    over = std::max(over, TenantRound(snap->effective_quota_bytes));
    if (EvictObjects(over, "quota", &tenant) == 0) break;
    st = ledger_->Charge(tenant, bytes);
  }
  return st;
}

absl::StatusOr<Placements> Evictor::AllocateWithEviction(const PlacementRequest& who,
                                                         uint64_t bytes, int replicas) {
  auto p = segments_->Allocate(who, bytes, replicas);
  if (absl::Status st = CheckEvictionHelps(who, bytes, replicas, p.status()); !st.ok()) return st;
  if (p.ok() || !absl::IsResourceExhausted(p.status())) return p;
  // Objects only in pools are not evicted for a shared put: that frees no shared space, and
  // would take a pooled tenant's data for another tenant.
  const std::optional<SegmentIds> shared = segments_->SegmentIdsFor(who);
  for (int attempt = 0; attempt < 2 && !p.ok() && absl::IsResourceExhausted(p.status());
       ++attempt) {
    auto totals = SharedCapacity(who.tier());
    if (totals.segments == 0) break;
    uint64_t target = std::max<uint64_t>(
        bytes * replicas, static_cast<uint64_t>(options_.eviction_ratio * totals.capacity));
    if (EvictObjects(target, "space", nullptr, UINT64_MAX, shared ? &*shared : nullptr,
                     who.tier()) == 0) {
      break;
    }
    p = segments_->Allocate(who, bytes, replicas);
  }
  return p;
}

absl::Status Evictor::CheckEvictionHelps(const PlacementRequest& who, uint64_t bytes, int replicas,
                                         const absl::Status& allocated) const {
  if (allocated.ok() || !absl::IsResourceExhausted(allocated)) return absl::OkStatus();
  if (segments_->Fenced(who)) {
    // After a master restart, space no inventory reported is quarantined for the write window
    // (a late writer of the old master may still land there), and a re-mounted segment takes
    // nothing until its report is in. Evicting restored objects for this put would destroy the
    // cache that was just rebuilt: the put waits instead.
    return absl::UnavailableError(
        absl::StrCat(allocated.message(),
                     "; space is quarantined or still being restored after a master restart: "
                     "retry in a few seconds"));
  }
  // Evict only if it could help: `replicas` distinct nodes must have a placeable segment at
  // least this large. Otherwise (too few nodes, a value larger than any segment) eviction
  // would destroy cached objects and the put would fail anyway.
  const uint64_t need =
      (bytes + proto::kAllocAlignment - 1) / proto::kAllocAlignment * proto::kAllocAlignment;
  const size_t nodes = segments_->NodesThatHold(who, need);
  if (nodes < static_cast<size_t>(replicas)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(allocated.message(), "; eviction cannot help: ", nodes,
                     " node(s) have a segment that holds ", common::FormatSize(need)));
  }
  // Eviction then takes only objects with a replica on the segments `who` may use, which are
  // of its tier alone: a GPU put evicts within the GPU tier, a host put within the host tier.
  return absl::OkStatus();
}

absl::StatusOr<Placements> Evictor::AllocateInPool(const std::string& tenant, proto::Tier tier,
                                                   uint64_t bytes, int replicas) {
  const PlacementRequest pool = PlacementRequest::Pool(tenant, tier);
  auto p = segments_->Allocate(pool, bytes, replicas);
  if (absl::Status st = CheckEvictionHelps(pool, bytes, replicas, p.status()); !st.ok()) return st;
  const std::optional<SegmentIds> ids = segments_->SegmentIdsFor(pool);
  for (int attempt = 0; attempt < 2 && !p.ok() && absl::IsResourceExhausted(p.status());
       ++attempt) {
    const uint64_t capacity = segments_->CapacityOf(pool).capacity;
    const uint64_t target = std::max<uint64_t>(
        bytes * replicas, static_cast<uint64_t>(options_.eviction_ratio * capacity));
    // Only the tenant's own objects with a replica in its pool: no other tenant's are there.
    if (EvictObjects(target, "pool", &tenant, UINT64_MAX, ids ? &*ids : nullptr, tier) == 0) {
      break;
    }
    p = segments_->Allocate(pool, bytes, replicas);
  }
  return p;
}

absl::Status Evictor::PoolError(const std::string& tenant, const absl::Status& st) {
  if (!absl::IsResourceExhausted(st)) return st;
  return absl::ResourceExhaustedError(absl::StrCat(
      "pool of tenant '", tenant, "' is full and none of its objects there can be evicted (",
      st.message(), "); pool_spill is false, so nothing is placed on shared segments"));
}

absl::StatusOr<Placements> Evictor::AllocateForPut(const std::string& tenant, bool pool_spill,
                                                   common::TierPreference tier, uint64_t bytes,
                                                   int replicas) {
  switch (tier) {
    case common::TierPreference::kHost:
      return AllocateOnTier(tenant, pool_spill, proto::Tier::kHost, bytes, replicas, true);
    case common::TierPreference::kGpu:
      return AllocateOnTier(tenant, pool_spill, proto::Tier::kGpu, bytes, replicas, true);
    case common::TierPreference::kDisk:
      return AllocateOnTier(tenant, pool_spill, proto::Tier::kDisk, bytes, replicas, true);
    case common::TierPreference::kAny:
      break;
  }
  // GPU memory is the scarce, fast tier: a put that takes any tier never evicts there.
  absl::StatusOr<Placements> gpu =
      AllocateOnTier(tenant, pool_spill, proto::Tier::kGpu, bytes, replicas, false);
  if (gpu.ok()) return gpu;
  absl::StatusOr<Placements> host =
      AllocateOnTier(tenant, pool_spill, proto::Tier::kHost, bytes, replicas, true);
  if (host.ok()) return host;
  return absl::Status(
      host.status().code(),
      absl::StrCat("tier any: the gpu tier has no room without evicting (", gpu.status().message(),
                   ") and the host tier has none (", host.status().message(), ")"));
}

absl::StatusOr<Placements> Evictor::AllocateOnTier(const std::string& tenant, bool pool_spill,
                                                   proto::Tier tier, uint64_t bytes, int replicas,
                                                   bool evict) {
  const SegmentRegistry::PoolState state = segments_->PoolOf(tenant, tier);
  const PutRoute route = PutRoute::For(state.mounted, state.seen, pool_spill);
  const PlacementRequest shared = PlacementRequest::Put(tenant, tier);
  if (route.pool_down) {
    return absl::UnavailableError(absl::StrCat(
        "pool of tenant '", tenant,
        "' has no segment mounted (its node is down or restarting) "
        "and pool_spill is false: retry once it is back, or set pool_spill: true to place on "
        "shared segments meanwhile"));
  }
  if (!evict) {
    absl::StatusOr<Placements> p = absl::ResourceExhaustedError("no route");
    if (route.pool) p = segments_->Allocate(PlacementRequest::Pool(tenant, tier), bytes, replicas);
    if (route.shared && !p.ok()) p = segments_->Allocate(shared, bytes, replicas);
    return p;
  }
  if (!route.pool) return AllocateWithEviction(shared, bytes, replicas);
  auto p = segments_->Allocate(PlacementRequest::Pool(tenant, tier), bytes, replicas);
  if (p.ok() || !absl::IsResourceExhausted(p.status())) return p;
  if (route.shared) {
    p = AllocateWithEviction(shared, bytes, replicas);
    if (p.ok() || !absl::IsResourceExhausted(p.status())) return p;
  }
  absl::StatusOr<Placements> in_pool = AllocateInPool(tenant, tier, bytes, replicas);
  if (in_pool.ok()) return in_pool;
  if (!route.shared) return PoolError(tenant, in_pool.status());
  return absl::ResourceExhaustedError(
      absl::StrCat("no room in the pool of tenant '", tenant, "' (", in_pool.status().message(),
                   ") nor on shared segments (", p.status().message(), ")"));
}

void Evictor::EnforceMaxEntries(const std::string& tenant) {
  auto snap = ledger_->Snapshot(tenant);
  if (!snap.has_value() || !snap->max_entries.has_value()) return;
  if (snap->entries <= *snap->max_entries) return;
  const uint64_t excess = snap->entries - *snap->max_entries;
  EvictObjects(UINT64_MAX, "max_entries", &tenant,
               std::max(excess, TenantRound(*snap->max_entries)));
}

void Evictor::EvictAboveWatermark() {
  for (proto::Tier tier : proto::kTiers) {
    auto t = SharedCapacity(tier);
    if (t.capacity == 0 ||
        static_cast<double>(t.used) <= options_.eviction_high_watermark_ratio * t.capacity) {
      continue;
    }
    // The tier's shared space only: objects held only in pools (or on the other tier) free
    // none of it.
    const std::optional<SegmentIds> shared =
        segments_->SegmentIdsFor(PlacementRequest::SharedCapacity(tier));
    EvictObjects(static_cast<uint64_t>(options_.eviction_ratio * t.capacity), "watermark", nullptr,
                 UINT64_MAX, shared ? &*shared : nullptr, tier);
  }
}

Placements Evictor::TakeVictim(uint32_t shard, uint32_t slot, uint64_t last_access, int64_t now) {
  Placements ps;
  ObjectShards::Shard& sh = shards_->shard(shard);
  granary::common::MutexLock lock(&sh.mu);
  auto it = sh.objects.FindSlot(slot);
  // Re-check: it may have been read, leased, removed or replaced since the scan (a slot reused
  // by another object holds another access ordinal).
  if (it == sh.objects.end() || it->second.state != ObjectState::kComplete ||
      it->second.last_access != last_access || Leased(it->second, now)) {
    return ps;
  }
  ps = it->second.replicas;
  if (InventoryOutbox* out = shards_->outbox()) out->Freed(it->first, it->second.generation, ps);
  sh.objects.erase(it);
  return ps;
}

uint64_t Evictor::EvictObjects(uint64_t bytes, const char* reason, const std::string* only_tenant,
                               uint64_t max_objects, const SegmentIds* on, proto::Tier tier) {
  granary::common::MutexLock round(&round_mu_);
  const int64_t now = clock_->NowMs();
  const int64_t started_us = common::MonotonicUs();
  TenantStates tenants;
  const uint64_t scanned = Scan(*shards_, only_tenant, on, now, &tenants);
  for (auto& [name, ts] : tenants) {
    for (auto& v : ts.cands) std::make_heap(v.begin(), v.end(), Later);
    auto snap = ledger_->Snapshot(name);
    ts.favoured = snap.has_value() && (snap->over_quota || snap->admission_closed);
  }
  const uint64_t fair_share = tenants.empty() ? 0 : SharedCapacity(tier).capacity / tenants.size();
  uint64_t freed = 0, count = 0;
  for (int p = 0; p < 2; ++p) {
    while (freed < bytes && count < max_objects) {
      auto picked = PickTenant(tenants, p, only_tenant != nullptr, fair_share);
      if (picked == tenants.end()) break;
      TenantState& ts = picked->second;
      std::vector<Candidate>& heap = ts.cands[p];
      std::pop_heap(heap.begin(), heap.end(), Later);
      const Candidate c = heap.back();
      heap.pop_back();
      Placements ps = TakeVictim(c.shard, c.slot, c.last_access, now);
      if (ps.empty()) continue;
      segments_->FreeEvicted(ps);
      ledger_->ReleaseEvicted(picked->first, PlacedBytes(ps));
      ts.bytes -= std::min(ts.bytes, c.bytes);
      ++ts.evicted;
      freed += c.bytes;
      ++count;
    }
  }
  for (const auto& [tenant, ts] : tenants) {
    if (ts.evicted == 0) continue;
    metrics_
        ->Counter("granary_tenant_evictions_total", "Objects evicted, by tenant and reason",
                  {{"tenant_id", tenant}, {"reason", reason}})
        ->Inc(ts.evicted);
  }
  if (count > 0) {
    counters_->evicted->Inc(count);
    counters_->evicted_bytes->Inc(freed);
    GRANARY_LOG_INFO << "evicted " << count << " object(s), " << common::FormatSize(freed) << " ("
                     << reason
                     << (only_tenant != nullptr ? ", tenant " + *only_tenant : std::string())
                     << ") in " << (common::MonotonicUs() - started_us) / 1000.0 << " ms, "
                     << scanned << " object(s) scanned";
  }
  return freed;
}

}  // namespace granary::master
