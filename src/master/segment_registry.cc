#include "master/segment_registry.h"

#include <chrono>
#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/range.h"
#include "common/size.h"
#include "proto/disk_layout.h"

namespace granary::master {
namespace {

OffsetAllocator::Allocation AllocationOf(const Placement& p) {
  return OffsetAllocator::Allocation{p.offset, p.size, p.alloc_handle};
}

std::string PoolKey(absl::string_view tenant, proto::Tier tier) {
  return absl::StrCat(tenant, absl::string_view("\0", 1), static_cast<int>(tier));
}

}  // namespace

SegmentRegistry::SegmentRegistry() {
  uint64_t wall_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count());
  granary::common::MutexLock lock(&mu_);
  next_id_ = wall_ms << 12;
}

absl::StatusOr<uint64_t> SegmentRegistry::Mount(const proto::MountSegmentRequest& req,
                                                uint64_t session, int64_t restore_deadline_ms,
                                                int64_t quarantine_until_ms) {
  if (req.size < proto::kAllocAlignment * 2) {
    return absl::InvalidArgumentError(absl::StrCat("segment '", req.name, "' is ", req.size,
                                                   " bytes; the minimum is ",
                                                   proto::kAllocAlignment * 2));
  }
  if (req.node_id.empty()) {
    // Placement keeps replicas on distinct node ids; an anonymous segment would defeat that.
    return absl::InvalidArgumentError(absl::StrCat("segment '", req.name, "' has no node id"));
  }
  if (req.base > UINT64_MAX - req.size) {
    return absl::InvalidArgumentError(absl::StrCat("segment '", req.name, "' at base ", req.base,
                                                   " with size ", req.size,
                                                   " wraps the address space"));
  }
  if (req.tier == proto::Tier::kGpu) {
    // Reached through its IPC handle; an rkey only where the node's UCX maps CUDA memory
    // (device memory is never handed to a UCX without CUDA support).
    if (req.gpu_ipc.empty() || req.gpu_uuid.size() != proto::kGpuUuidBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GPU segment '", req.name, "' needs an IPC handle and a ", proto::kGpuUuidBytes,
          "-byte device UUID (got ", req.gpu_ipc.size(), " and ", req.gpu_uuid.size(), " bytes)"));
    }
  } else if (req.tier == proto::Tier::kDisk) {
    // Read and written by its node only (Read and Write messages): no memory, so no rkey; its
    // allocations are whole disk blocks.
    if (req.size % proto::kDiskBlock != 0) {
      return absl::InvalidArgumentError(absl::StrCat("disk tier '", req.name, "' of ", req.size,
                                                     " bytes is not a whole number of ",
                                                     proto::kDiskBlock, "-byte blocks"));
    }
  } else if (req.rkey.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("segment '", req.name, "' has no remote key"));
  }
  if (req.worker_address.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment '", req.name, "' has no worker address"));
  }
  if (req.node_address.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("segment '", req.name, "' has no node address"));
  }
  granary::common::MutexLock lock(&mu_);
  for (const auto& [id, s] : segments_) {
    if (s.info.node_id == req.node_id && s.info.name == req.name) {
      return absl::AlreadyExistsError(absl::StrCat("segment '", req.name, "' of node ", req.node_id,
                                                   " is already mounted as ", id));
    }
  }
  uint64_t id = next_id_++;
  Segment& s = segments_[id];
  s.info.segment_id = id;
  s.info.name = req.name;
  s.info.node_id = req.node_id;
  s.info.node_address = req.node_address;
  s.info.base = req.base;
  s.info.size = req.size;
  s.info.tier = req.tier;
  s.info.pool = req.pool;
  s.info.rkey = req.rkey;
  s.info.worker_address = req.worker_address;
  s.info.host_id = req.host_id;
  s.info.gpu_ipc = req.gpu_ipc;
  s.info.gpu_uuid = req.gpu_uuid;
  s.info.nic = req.nic;
  s.info.numa_node = req.numa_node;
  s.info.gpu = req.gpu;
  s.session = session;
  s.alloc = std::make_unique<OffsetAllocator>(
      req.size, req.tier == proto::Tier::kDisk ? proto::kDiskBlock : proto::kAllocAlignment);
  s.restoring = req.resumed;
  s.restore_deadline_ms = restore_deadline_ms;
  s.quarantine_until_ms = req.resumed ? quarantine_until_ms : 0;
  if (!req.pool.empty()) pools_seen_.insert(PoolKey(req.pool, req.tier));
  RebuildOrderLocked();
  return id;
}

void SegmentRegistry::SetQuarantineUntil(int64_t ms) {
  granary::common::MutexLock lock(&mu_);
  quarantine_until_ms_ = ms;
}

void SegmentRegistry::ReserveAll(uint64_t session, const std::vector<Range>& ranges,
                                 std::vector<absl::StatusOr<Placement>>* out) {
  out->clear();
  out->reserve(ranges.size());
  granary::common::MutexLock lock(&mu_);
  Segment* last = nullptr;
  for (const Range& r : ranges) {
    out->push_back(ReserveLocked(r.segment_id, session, r.offset, r.size, &last));
  }
}

absl::StatusOr<Placement> SegmentRegistry::ReserveLocked(uint64_t segment_id, uint64_t session,
                                                         uint64_t offset, uint64_t size,
                                                         Segment** last) {
  if (*last == nullptr || (*last)->info.segment_id != segment_id) {
    auto it = segments_.find(segment_id);
    if (it == segments_.end() || it->second.session != session) {
      return absl::InvalidArgumentError(
          absl::StrCat("segment ", segment_id, " is not mounted by this node"));
    }
    *last = &it->second;
  }
  Segment& s = **last;
  if (size == 0 || offset % proto::kAllocAlignment != 0 ||
      !common::OffsetWithin(s.info.size, offset, size)) {
    return absl::InvalidArgumentError(absl::StrCat("range of ", size, " bytes at offset ", offset,
                                                   " is unaligned or outside segment ", segment_id,
                                                   " of ", s.info.size, " bytes"));
  }
  auto a = s.alloc->AllocateAt(offset, size);
  if (!a.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat("range of ", size, " bytes at offset ",
                                                      offset, " of segment ", segment_id,
                                                      " overlaps space already taken"));
  }
  return Placement{segment_id, a->offset, a->size, a->handle};
}

uint64_t SegmentRegistry::FinishRestoreLocked(Segment& s, int64_t now_ms) {
  if (!s.restoring) return 0;
  s.restoring = false;
  if (now_ms >= QuarantineEndLocked(s)) return 0;
  uint64_t bytes = 0;
  for (const auto& a : s.alloc->TakeAllFree()) {
    bytes += a.size;
    s.quarantine.push_back(a);
  }
  s.quarantined += bytes;
  return bytes;
}

uint64_t SegmentRegistry::FinishRestore(uint64_t segment_id, int64_t now_ms) {
  granary::common::MutexLock lock(&mu_);
  auto it = segments_.find(segment_id);
  if (it == segments_.end()) return 0;
  return FinishRestoreLocked(it->second, now_ms);
}

uint64_t SegmentRegistry::Expire(int64_t now_ms) {
  granary::common::MutexLock lock(&mu_);
  uint64_t released = 0;
  for (auto& [id, s] : segments_) {
    if (s.restoring && now_ms >= s.restore_deadline_ms) FinishRestoreLocked(s, now_ms);
    if (!s.held.empty()) {
      auto due = std::stable_partition(s.held.begin(), s.held.end(),
                                       [&](const auto& h) { return h.first > now_ms; });
      for (auto it = due; it != s.held.end(); ++it) {
        s.alloc->Free(it->second);
        released += it->second.size;
        s.held_bytes -= it->second.size;
      }
      s.held.erase(due, s.held.end());
    }
    if (s.quarantined == 0 || now_ms < QuarantineEndLocked(s)) continue;
    for (const auto& a : s.quarantine) s.alloc->Free(a);
    released += s.quarantined;
    s.quarantine.clear();
    s.quarantined = 0;
  }
  return released;
}

bool SegmentRegistry::Fenced(const PlacementRequest& who) const {
  granary::common::MutexLock lock(&mu_);
  for (const auto& [id, s] : segments_) {
    if (who.Allows(s.info) && (s.restoring || s.quarantined > 0)) return true;
  }
  return false;
}

void SegmentRegistry::RebuildOrderLocked() {
  order_.clear();
  order_.reserve(segments_.size());
  for (auto& [id, s] : segments_) order_.push_back(&s);
}

bool SegmentRegistry::Unmount(uint64_t segment_id) {
  granary::common::MutexLock lock(&mu_);
  bool erased = segments_.erase(segment_id) > 0;
  if (erased) RebuildOrderLocked();
  return erased;
}

std::vector<uint64_t> SegmentRegistry::SegmentsOf(uint64_t session) const {
  granary::common::MutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (const auto& [id, s] : segments_) {
    if (s.session == session) ids.push_back(id);
  }
  return ids;
}

// GCC 12 reports absl::InlinedVector<T, 1>'s move (a memcpy of its whole inline/heap union)
// as a read of uninitialized memory when the vector might be empty: a known false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
absl::StatusOr<Placements> SegmentRegistry::Allocate(const PlacementRequest& who, uint64_t bytes,
                                                     int replicas) {
  granary::common::MutexLock lock(&mu_);
  if (segments_.empty()) {
    return absl::ResourceExhaustedError("no segment is mounted: start a granary_node");
  }
  const std::vector<Segment*>& order = order_;
  size_t start = rotor_++ % order.size();
  Placements out;
  // The nodes already holding a replica of this object: a few, compared by pointer to their id.
  absl::InlinedVector<const std::string*, 4> nodes;
  auto used = [&nodes](const std::string& node) {
    for (const std::string* n : nodes) {
      if (*n == node) return true;
    }
    return false;
  };
  for (size_t i = 0; i < order.size() && static_cast<int>(out.size()) < replicas; ++i) {
    Segment* s = order[(start + i) % order.size()];
    if (!who.Allows(s->info) || s->restoring) continue;
    if (replicas > 1 && used(s->info.node_id)) continue;
    auto a = s->alloc->Allocate(bytes);
    if (!a.has_value()) continue;
    nodes.push_back(&s->info.node_id);
    out.push_back(Placement{s->info.segment_id, a->offset, a->size, a->handle});
  }
  if (static_cast<int>(out.size()) < replicas) {
    for (const auto& p : out) segments_[p.segment_id].alloc->Free(AllocationOf(p));
    absl::flat_hash_set<std::string> all_nodes;
    for (auto* s : order) {
      if (who.Allows(s->info)) all_nodes.insert(s->info.node_id);
    }
    if (static_cast<int>(all_nodes.size()) < replicas) {
      return absl::ResourceExhaustedError(
          absl::StrCat("replica_num=", replicas, " needs that many nodes, but ", all_nodes.size(),
                       " node(s) have segments for ", who.ToString(), " mounted"));
    }
    return absl::ResourceExhaustedError(absl::StrCat("no space for ", common::FormatSize(bytes),
                                                     " on ", replicas, " distinct node(s); found ",
                                                     out.size()));
  }
  return out;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

absl::StatusOr<Placement> SegmentRegistry::AllocateOn(const std::string& target,
                                                      const PlacementRequest& who, uint64_t bytes,
                                                      const Placements& existing) {
  granary::common::MutexLock lock(&mu_);
  std::string node_id;
  for (const auto& [id, s] : segments_) {
    if (s.info.node_id == target || s.info.node_address == target) node_id = s.info.node_id;
  }
  if (node_id.empty()) {
    return absl::NotFoundError(absl::StrCat("no node '", target, "' has a segment mounted"));
  }
  for (const Placement& p : existing) {
    auto it = segments_.find(p.segment_id);
    if (it != segments_.end() && it->second.info.node_id == node_id) {
      return absl::FailedPreconditionError(
          absl::StrCat("node '", target, "' already holds a replica"));
    }
  }
  bool usable = false;
  std::string pool;  // a pool the node's segments belong to, for the refusal
  bool shared = false;
  for (auto& [id, s] : segments_) {
    if (s.info.node_id != node_id) continue;
    if (s.info.pool.empty()) {
      shared = true;
    } else {
      pool = s.info.pool;
    }
    if (!who.Allows(s.info) || s.restoring) continue;
    usable = true;
    auto a = s.alloc->Allocate(bytes);
    if (a.has_value()) return Placement{id, a->offset, a->size, a->handle};
  }
  if (!usable) {
    std::string why =
        !pool.empty() && pool != who.tenant()
            ? absl::StrCat("it is tenant '", pool, "''s pool, and no other tenant's bytes go there")
        : shared ? std::string(
                       "its segments are shared, and the tenant is confined "
                       "to its own pool (pool_spill is false)")
                 : std::string("its segments are of another tier");
    return absl::FailedPreconditionError(
        absl::StrCat("node '", target, "' has no segment for ", who.ToString(), ": ", why));
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("node '", target, "' has no free block of ", common::FormatSize(bytes)));
}

std::optional<proto::SegmentInfo> SegmentRegistry::Find(uint64_t segment_id) const {
  granary::common::MutexLock lock(&mu_);
  auto it = segments_.find(segment_id);
  if (it == segments_.end()) return std::nullopt;
  return it->second.info;
}

void SegmentRegistry::FreeLater(const Placements& ps, int64_t at_ms) {
  granary::common::MutexLock lock(&mu_);
  for (const auto& p : ps) {
    auto it = segments_.find(p.segment_id);
    if (it == segments_.end()) continue;
    it->second.held.emplace_back(at_ms, AllocationOf(p));
    it->second.held_bytes += p.size;
  }
}

void SegmentRegistry::Free(const Placement& p) {
  granary::common::MutexLock lock(&mu_);
  auto it = segments_.find(p.segment_id);
  if (it == segments_.end()) return;
  it->second.alloc->Free(AllocationOf(p));
}

void SegmentRegistry::FreeEvicted(const Placements& ps) {
  granary::common::MutexLock lock(&mu_);
  Evictions* counted = nullptr;
  for (const auto& p : ps) {
    auto it = segments_.find(p.segment_id);
    if (it == segments_.end()) continue;
    it->second.alloc->Free(AllocationOf(p));
    if (counted == nullptr) {
      counted = &evicted_[static_cast<int>(it->second.info.tier)];
      ++counted->objects;
    }
    counted->bytes += p.size;
  }
}

SegmentRegistry::Evictions SegmentRegistry::Evicted(proto::Tier tier) const {
  granary::common::MutexLock lock(&mu_);
  return evicted_[static_cast<int>(tier)];
}

std::optional<uint64_t> SegmentRegistry::AddressOf(const Placement& p) const {
  granary::common::MutexLock lock(&mu_);
  auto it = segments_.find(p.segment_id);
  if (it == segments_.end()) return std::nullopt;
  return it->second.info.base + p.offset;
}

std::vector<proto::ReplicaDesc> SegmentRegistry::Describe(const Placements& ps) const {
  std::vector<proto::ReplicaDesc> out;
  out.reserve(ps.size());
  granary::common::MutexLock lock(&mu_);
  for (const auto& p : ps) {
    auto it = segments_.find(p.segment_id);
    if (it == segments_.end()) continue;
    out.push_back(proto::ReplicaDesc{p.segment_id, it->second.info.base + p.offset, p.size});
  }
  return out;
}

SegmentRegistry::Totals SegmentRegistry::totals() const {
  granary::common::MutexLock lock(&mu_);
  Totals t;
  for (const auto& [id, s] : segments_) {
    t.capacity += s.info.size;
    t.used += s.alloc->used_bytes() - s.quarantined - s.held_bytes;
    t.quarantined += s.quarantined + s.held_bytes;
  }
  t.segments = segments_.size();
  return t;
}

void SegmentRegistry::AddLocked(const Segment& s, Totals* t) const {
  t->capacity += s.info.size;
  t->used += s.alloc->used_bytes() - s.quarantined - s.held_bytes;
  t->quarantined += s.quarantined + s.held_bytes;
  ++t->segments;
}

SegmentRegistry::Totals SegmentRegistry::totals(proto::Tier tier) const {
  granary::common::MutexLock lock(&mu_);
  Totals t;
  for (const auto& [id, s] : segments_) {
    if (s.info.tier == tier) AddLocked(s, &t);
  }
  return t;
}

SegmentRegistry::Totals SegmentRegistry::CapacityOf(const PlacementRequest& who) const {
  granary::common::MutexLock lock(&mu_);
  Totals t;
  for (const auto& [id, s] : segments_) {
    if (who.Allows(s.info)) AddLocked(s, &t);
  }
  return t;
}

size_t SegmentRegistry::NodesThatHold(const PlacementRequest& who, uint64_t aligned_bytes) const {
  const uint64_t a = proto::kAllocAlignment;
  granary::common::MutexLock lock(&mu_);
  absl::flat_hash_set<std::string> nodes;
  for (const auto& [id, s] : segments_) {
    if (!who.Allows(s.info) || s.info.size / a * a < aligned_bytes) continue;
    nodes.insert(s.info.node_id);
  }
  return nodes.size();
}

std::vector<proto::SegmentInfo> SegmentRegistry::List() const {
  granary::common::MutexLock lock(&mu_);
  std::vector<proto::SegmentInfo> out;
  for (const auto& [id, s] : segments_) {
    out.push_back(s.info);
    out.back().used = s.alloc->used_bytes() - s.quarantined - s.held_bytes;
  }
  return out;
}

SegmentRegistry::PoolState SegmentRegistry::PoolOf(absl::string_view tenant,
                                                   proto::Tier tier) const {
  PoolState st;
  granary::common::MutexLock lock(&mu_);
  if (pools_seen_.empty()) return st;  // the common case: no pool at all, no key built
  st.seen = pools_seen_.contains(PoolKey(tenant, tier));
  if (!st.seen) return st;
  for (const auto& [id, s] : segments_) {
    if (s.info.tier == tier && s.info.pool == tenant) st.mounted = true;
  }
  return st;
}

std::optional<absl::flat_hash_set<uint64_t>> SegmentRegistry::SegmentIdsFor(
    const PlacementRequest& who) const {
  granary::common::MutexLock lock(&mu_);
  absl::flat_hash_set<uint64_t> ids;
  for (const auto& [id, s] : segments_) {
    if (who.Allows(s.info)) ids.insert(id);
  }
  if (ids.size() == segments_.size()) return std::nullopt;
  return ids;
}

std::vector<SegmentRegistry::PoolTotals> SegmentRegistry::Pools() const {
  granary::common::MutexLock lock(&mu_);
  std::map<std::string, Totals> by_tenant;
  for (const auto& [id, s] : segments_) {
    if (s.info.pool.empty()) continue;
    AddLocked(s, &by_tenant[s.info.pool]);
  }
  std::vector<PoolTotals> out;
  out.reserve(by_tenant.size());
  for (auto& [tenant, t] : by_tenant) out.push_back(PoolTotals{tenant, t});
  return out;
}

double SegmentRegistry::MeanFragmentation() const {
  granary::common::MutexLock lock(&mu_);
  if (segments_.empty()) return 0;
  double sum = 0;
  for (const auto& [id, s] : segments_) sum += s.alloc->fragmentation();
  return sum / segments_.size();
}

}  // namespace granary::master
