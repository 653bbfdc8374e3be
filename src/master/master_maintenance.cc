// MasterService: node loss, eviction, timers and statistics (the scans over the whole table).
#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
  ledger_.SetCapacity(segments_.totals().capacity);
  if (lost > 0) {
    c_.lost->Inc(lost);
    LOG_WARN << lost << " object(s) lost with their only replica(s)";
  }
}

uint64_t MasterService::Evict(uint64_t bytes, const char* reason) {
  return EvictObjects(bytes, reason, nullptr);
}

void MasterService::EnforceMaxEntries(const std::string& tenant) {
  auto snap = ledger_.Snapshot(tenant);
  if (!snap.has_value() || !snap->max_entries.has_value()) return;
  if (snap->entries <= *snap->max_entries) return;
  EvictObjects(UINT64_MAX, "max_entries", &tenant, snap->entries - *snap->max_entries);
}

uint64_t MasterService::EvictObjects(uint64_t bytes, const char* reason,
                                     const std::string* only_tenant, uint64_t max_objects) {
  granary::MutexLock evict_lock(&evict_mu_);
  const int64_t now = clock_->NowMs();
  // One scan gathers every evictable object (complete, unleased, not hard-pinned) per tenant,
  // oldest access first, and every tenant's bytes. Then victims are taken one at a time, in
  // this order (DESIGN section 4, fair eviction):
  //   1. tenants over quota or closed to admission,
  //   2. the tenant furthest above its fair share of capacity (capacity / tenants with data),
  //   3. global LRU;
  // soft-pinned objects only when nothing else is left. Cost: O(objects) for the scan plus
  // O(tenants) per victim; rounds are rare (they free eviction_ratio of capacity).
  struct Candidate {
    uint64_t last_access;
    uint64_t bytes;
    uint32_t shard;
    std::string key;
  };
  struct TenantState {
    std::vector<Candidate> cands[2];  // [0] unpinned, [1] soft-pinned; oldest first
    size_t next[2] = {0, 0};
    uint64_t bytes = 0;  // everything the tenant holds (complete objects)
    bool favoured = false;
  };
  absl::flat_hash_map<std::string, TenantState> tenants;
  for (uint32_t s = 0; s < kShards; ++s) {
    granary::MutexLock lock(&shards_[s].mu);
    for (const auto& [tk, o] : shards_[s].objects) {
      if (o.state != ObjectState::kComplete) continue;
      if (only_tenant != nullptr &&
          !(tk.size() > only_tenant->size() && tk[only_tenant->size()] == '\0' &&
            absl::StartsWith(tk, *only_tenant))) {
        continue;
      }
      TenantState& ts = tenants[absl::string_view(tk.data(), tk.find('\0'))];
      const uint64_t b = PlacedBytes(o.replicas);
      ts.bytes += b;
      if (o.pin == kPinHard || (o.lease_count > 0 && o.lease_until_ms > now)) continue;
      ts.cands[o.pin == kPinSoft ? 1 : 0].push_back(Candidate{o.last_access, b, s, std::string(tk)});
    }
  }
  for (auto& [name, ts] : tenants) {
    for (auto& v : ts.cands) {
      std::sort(v.begin(), v.end(), [](const Candidate& a, const Candidate& b) {
        return a.last_access < b.last_access;
      });
    }
    auto snap = ledger_.Snapshot(name);
    ts.favoured = snap.has_value() && (snap->over_quota || snap->admission_closed);
  }
  const uint64_t fair_share =
      tenants.empty() ? 0 : segments_.totals().capacity / tenants.size();
  // Picks the next victim's tenant for pass `p` (0 unpinned, 1 soft-pinned), or nullptr.
  auto pick = [&](int p) -> TenantState* {
    TenantState* best = nullptr;
    int best_rank = 3;
    int64_t best_key = 0;
    for (auto& [name, ts] : tenants) {
      if (ts.next[p] >= ts.cands[p].size()) continue;
      const Candidate& c = ts.cands[p][ts.next[p]];
      int rank;
      int64_t key;  // smaller is better within a rank
      if (only_tenant == nullptr && ts.favoured) {
        rank = 0;
        key = c.last_access;
      } else if (only_tenant == nullptr && ts.bytes > fair_share) {
        rank = 1;
        key = -static_cast<int64_t>(ts.bytes - fair_share);
      } else {
        rank = 2;
        key = c.last_access;
      }
      if (rank < best_rank || (rank == best_rank && key < best_key)) {
        best = &ts;
        best_rank = rank;
        best_key = key;
      }
    }
    return best;
  };
  uint64_t freed = 0, count = 0;
  absl::flat_hash_map<std::string, uint64_t> per_tenant;
  for (int p = 0; p < 2; ++p) {
    while (freed < bytes && count < max_objects) {
      TenantState* ts = pick(p);
      if (ts == nullptr) break;
      const Candidate& c = ts->cands[p][ts->next[p]++];
      Placements ps;
      {
        Shard& sh = shards_[c.shard];
        granary::MutexLock lock(&sh.mu);
        auto it = sh.objects.find(c.key);
        // Re-check: it may have been read, leased or replaced since the scan.
        if (it == sh.objects.end() || it->second.state != ObjectState::kComplete ||
            it->second.last_access != c.last_access ||
            (it->second.lease_count > 0 && it->second.lease_until_ms > now)) {
          continue;
        }
        ps = it->second.replicas;
        sh.objects.erase(it);
      }
      segments_.Free(ps);
      const std::string tenant = TenantOfKey(c.key);
      ledger_.Release(tenant, PlacedBytes(ps));
      ts->bytes -= std::min(ts->bytes, c.bytes);
      ++per_tenant[tenant];
      freed += c.bytes;
      ++count;
    }
  }
  for (const auto& [tenant, n] : per_tenant) {
    metrics_
        ->Counter("granary_tenant_evictions_total", "Objects evicted, by tenant and reason",
                  {{"tenant_id", tenant}, {"reason", reason}})
        ->Inc(n);
  }
  if (count > 0) {
    c_.evicted->Inc(count);
    c_.evicted_bytes->Inc(freed);
    LOG_INFO << "evicted " << count << " object(s), " << FormatSize(freed) << " (" << reason
             << (only_tenant != nullptr ? ", tenant " + *only_tenant : std::string()) << ")";
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
  auto t = segments_.totals();
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
