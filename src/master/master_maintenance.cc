// MasterService: node loss, eviction, timers and statistics (the scans over the whole table).
#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/size.h"
#include "master/master_service.h"
#include "proto/alloc_header.h"

namespace granary::master {

uint64_t MasterService::AllocBytes(uint64_t value_size) {
  const uint64_t a = proto::kAllocAlignment;
  return (proto::kAllocHeaderSize + value_size + a - 1) / a * a;
}

uint64_t MasterService::PlacedBytes(const Placements& ps) {
  uint64_t b = 0;
  for (const auto& p : ps) b += p.size;
  return b;
}

std::string MasterService::TenantOfKey(absl::string_view table_key) {
  return std::string(table_key.substr(0, table_key.find('\0')));
}

absl::Status MasterService::ChargeWithTenantEviction(const std::string& tenant, uint64_t bytes) {
  absl::Status st = ledger_.Charge(tenant, bytes);
  // Over its quota: make room among the tenant's own oldest objects, at most twice. Another
  // tenant's objects are never touched for it.
  for (int attempt = 0; attempt < 2 && !st.ok(); ++attempt) {
    if (!absl::StartsWith(st.message(), "QUOTA_EXCEEDED")) break;
    auto snap = ledger_.Snapshot(tenant);
    if (!snap.has_value()) break;
    // An over-quota tenant (its quota was lowered below what it holds) is refused until it is
    // back under (DESIGN section 5; global eviction takes its objects first), and a put larger
    // than the whole quota can never be admitted: evicting for either would only destroy data.
    if (snap->over_quota || bytes > snap->effective_quota_bytes) break;
    uint64_t over = snap->charged_bytes + bytes > snap->effective_quota_bytes
                        ? snap->charged_bytes + bytes - snap->effective_quota_bytes
                        : bytes;
    // A round scans the whole table: free a round's worth (see TenantRound), not one put's.
    over = std::max(over, TenantRound(snap->effective_quota_bytes));
    if (EvictObjects(over, "quota", &tenant) == 0) break;
    st = ledger_.Charge(tenant, bytes);
  }
  return st;
}

void MasterService::DropSegments(const std::vector<uint64_t>& ids) {
  absl::flat_hash_set<uint64_t> gone(ids.begin(), ids.end());
  for (uint64_t id : ids) segments_.Unmount(id);
  uint64_t lost = 0;
  for (Shard& sh : shards_) {
    granary::MutexLock lock(&sh.mu);
    for (auto it = sh.objects.begin(); it != sh.objects.end();) {
      Object& o = it->second;
      Placements& r = o.replicas;
      auto end = std::remove_if(r.begin(), r.end(),
                                [&](const Placement& p) { return gone.contains(p.segment_id); });
      uint64_t dropped = 0;
      for (auto p = end; p != r.end(); ++p) dropped += p->size;
      r.erase(end, r.end());
      if (dropped > 0) {
        const std::string tenant = TenantOfKey(it->first);
        if (o.state == ObjectState::kProcessing) {
          ledger_.Refund(tenant, dropped);  // its writer's PutEnd commits what is left
        } else if (r.empty()) {
          ledger_.Release(tenant, dropped);
        } else {
          ledger_.ReleaseBytes(tenant, dropped);  // one replica fewer, same entry
        }
      }
      if (r.empty()) {
        ++lost;
        sh.objects.erase(it++);
      } else {
        ++it;
      }
    }
  }
  ledger_.SetCapacity(capacity());
  if (lost > 0) {
    c_.lost->Inc(lost);
    LOG_WARN << lost << " object(s) lost with their only replica(s)";
  }
}

uint64_t MasterService::Evict(uint64_t bytes, const char* reason) {
  return EvictObjects(bytes, reason, nullptr);
}

uint64_t MasterService::TenantRound(uint64_t cap) const {
  return static_cast<uint64_t>(options_.eviction_ratio * static_cast<double>(cap));
}

void MasterService::EnforceMaxEntries(const std::string& tenant) {
  auto snap = ledger_.Snapshot(tenant);
  if (!snap.has_value() || !snap->max_entries.has_value()) return;
  if (snap->entries <= *snap->max_entries) return;
  const uint64_t excess = snap->entries - *snap->max_entries;
  EvictObjects(UINT64_MAX, "max_entries", &tenant,
               std::max(excess, TenantRound(*snap->max_entries)));
}

uint64_t MasterService::EvictObjects(uint64_t bytes, const char* reason,
                                     const std::string* only_tenant, uint64_t max_objects) {
  granary::MutexLock evict_lock(&evict_mu_);
  const int64_t now = clock_->NowMs();
  const int64_t started_us = MonotonicUs();
  // One scan gathers every evictable object (complete, unleased, not hard-pinned) per tenant,
  // and every tenant's bytes. Then victims are taken one at a time, each tenant's oldest access
  // first (DESIGN section 4, fair eviction):
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
  // std::*_heap keep the largest on top: "later" puts the oldest access there.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.last_access > b.last_access;
  };
  struct TenantState {
    std::vector<Candidate> cands[2];  // [0] unpinned, [1] soft-pinned; heaps, oldest on top
    uint64_t bytes = 0;               // everything the tenant holds (complete objects)
    uint64_t evicted = 0;
    bool favoured = false;
  };
  absl::flat_hash_map<std::string, TenantState> tenants;
  // Consecutive objects mostly belong to one tenant: the last lookup is kept. Only a lookup
  // inserts, and it refreshes the pointer, so the pointer never outlives a rehash.
  std::string last_name;
  TenantState* last = nullptr;
  uint64_t scanned = 0;
  for (uint32_t s = 0; s < kShards; ++s) {
    granary::MutexLock lock(&shards_[s].mu);
    shards_[s].objects.ForEachSlot([&](uint32_t slot, absl::string_view tk, const Object& o) {
      if (o.state != ObjectState::kComplete) return;
      const absl::string_view name = tk.substr(0, tk.find('\0'));
      if (only_tenant != nullptr && (name.size() == tk.size() || name != *only_tenant)) return;
      ++scanned;
      if (last == nullptr || name != last_name) {
        last = &tenants[name];
        last_name.assign(name.data(), name.size());
      }
      const uint64_t b = PlacedBytes(o.replicas);
      last->bytes += b;
      if (o.pin == kPinHard || (o.lease_count > 0 && o.lease_until_ms > now)) return;
      last->cands[o.pin == kPinSoft ? 1 : 0].push_back(Candidate{o.last_access, b, s, slot});
    });
  }
  for (auto& [name, ts] : tenants) {
    for (auto& v : ts.cands) std::make_heap(v.begin(), v.end(), later);
    auto snap = ledger_.Snapshot(name);
    ts.favoured = snap.has_value() && (snap->over_quota || snap->admission_closed);
  }
  const uint64_t fair_share = tenants.empty() ? 0 : capacity() / tenants.size();
  // Picks the next victim's tenant for pass `p` (0 unpinned, 1 soft-pinned), or end().
  auto pick = [&](int p) {
    auto best = tenants.end();
    int best_rank = 3;
    int64_t best_key = 0;
    for (auto it = tenants.begin(); it != tenants.end(); ++it) {
      const TenantState& ts = it->second;
      if (ts.cands[p].empty()) continue;
      const Candidate& c = ts.cands[p].front();
      int rank;
      int64_t key;  // smaller is better within a rank
      if (only_tenant == nullptr && ts.favoured) {
        rank = 0;
        key = static_cast<int64_t>(c.last_access);
      } else if (only_tenant == nullptr && ts.bytes > fair_share) {
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
  };
  uint64_t freed = 0, count = 0;
  for (int p = 0; p < 2; ++p) {
    while (freed < bytes && count < max_objects) {
      auto picked = pick(p);
      if (picked == tenants.end()) break;
      const std::string& tenant = picked->first;
      TenantState& ts = picked->second;
      std::vector<Candidate>& heap = ts.cands[p];
      std::pop_heap(heap.begin(), heap.end(), later);
      const Candidate c = heap.back();
      heap.pop_back();
      Placements ps;
      {
        Shard& sh = shards_[c.shard];
        granary::MutexLock lock(&sh.mu);
        auto it = sh.objects.FindSlot(c.slot);
        // Re-check: it may have been read, leased, removed or replaced since the scan (a slot
        // reused by another object holds another access ordinal).
        if (it == sh.objects.end() || it->second.state != ObjectState::kComplete ||
            it->second.last_access != c.last_access ||
            (it->second.lease_count > 0 && it->second.lease_until_ms > now)) {
          continue;
        }
        ps = it->second.replicas;
        sh.objects.erase(it);
      }
      segments_.Free(ps);
      ledger_.Release(tenant, PlacedBytes(ps));
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
    c_.evicted->Inc(count);
    c_.evicted_bytes->Inc(freed);
    LOG_INFO << "evicted " << count << " object(s), " << FormatSize(freed) << " (" << reason
             << (only_tenant != nullptr ? ", tenant " + *only_tenant : std::string()) << ") in "
             << (MonotonicUs() - started_us) / 1000.0 << " ms, " << scanned << " object(s) scanned";
  }
  return freed;
}

std::vector<SessionId> MasterService::Tick() {
  const int64_t now = clock_->NowMs();
  for (const auto& e : deadlines_.Advance(now)) {
    if (!e.key.empty() && e.key[0] == '\x01') {  // a copy's deadline
      AbortCopy(e.key.substr(1), e.generation, "deadline passed");
    } else if (AbortPut(e.key, e.generation, "deadline passed")) {
      c_.put_expired->Inc();
    }
  }
  std::vector<SessionId> dead;
  {
    granary::MutexLock lock(&sessions_mu_);
    for (const auto& [sid, s] : sessions_) {
      if (!s.internal && now - s.last_seen_ms > options_.client_ttl_ms) dead.push_back(sid);
    }
  }
  for (SessionId sid : dead) {
    LOG_WARN << "session " << sid << " sent nothing for more than " << options_.client_ttl_ms
             << " ms: declaring it dead";
    c_.sessions_expired->Inc();
    SessionClosed(sid);
  }
  auto t = SharedCapacity(proto::Tier::kHost);
  if (t.capacity > 0 &&
      static_cast<double>(t.used) > options_.eviction_high_watermark_ratio * t.capacity) {
    Evict(static_cast<uint64_t>(options_.eviction_ratio * t.capacity), "watermark");
  }
  return dead;
}

MasterService::Stats MasterService::GetStats() const {
  Stats s;
  for (const Shard& sh : shards_) {
    granary::MutexLock lock(&sh.mu);
    s.objects += sh.objects.size();
    for (const auto& [k, o] : sh.objects) s.processing += o.state == ObjectState::kProcessing;
  }
  auto t = segments_.totals();
  s.capacity = t.capacity;
  s.used = t.used;
  s.segments = t.segments;
  {
    granary::MutexLock lock(&sessions_mu_);
    s.sessions = sessions_.size();
  }
  s.pending_deadlines = deadlines_.size();
  return s;
}

}  // namespace granary::master
