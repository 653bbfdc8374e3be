#include "node/node_inventory.h"

#include <algorithm>
#include <atomic>

#include "common/log.h"
#include "common/range.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "device/device_backend.h"

namespace granary::node {
namespace {

uint64_t* WordAt(const SegmentSpan& s, uint64_t offset, size_t word) {
  return reinterpret_cast<uint64_t*>(s.base + offset) + word;
}

}  // namespace

NodeInventory::~NodeInventory() {
  granary::common::MutexLock lock(&mu_);
  if (gpu_headers_ != nullptr) device::ActiveRuntime().HostFreePinned(gpu_headers_);
  for (const auto& [device, stream] : gpu_streams_) device::ActiveRuntime().DestroyStream(stream);
}

absl::StatusOr<const proto::AllocHeader*> NodeInventory::ReadGpuHeaders(size_t index,
                                                                        const uint64_t* offsets,
                                                                        size_t n) {
  const SegmentSpan& s = (*segments_)[index];
  device::DeviceRuntime& backend = device::ActiveRuntime();
  if (gpu_headers_ == nullptr && gpu_headers_fallback_.empty()) {
    absl::StatusOr<void*> pinned =
        backend.HostAllocPinned(kGpuHeaderChunk * sizeof(proto::AllocHeader));
    if (pinned.ok()) {
      gpu_headers_ = *pinned;
    } else {
      gpu_headers_fallback_.resize(kGpuHeaderChunk);
    }
  }
  auto* staged = gpu_headers_ != nullptr ? static_cast<proto::AllocHeader*>(gpu_headers_)
                                         : gpu_headers_fallback_.data();
  std::vector<device::CopyRegion> regions(n);
  for (size_t i = 0; i < n; ++i) {
    regions[i] = {reinterpret_cast<const void*>(s.base + offsets[i]), &staged[i],
                  sizeof(proto::AllocHeader)};
  }
  // On a stream of the inventory's own, not the legacy default stream: that one would wait for
  // an engine's work on blocking streams of the device, and make it wait.
  void*& stream = gpu_streams_[s.gpu];
  if (stream == nullptr) {
    absl::StatusOr<void*> created = backend.CreateStream(s.gpu);
    if (!created.ok()) {
      gpu_streams_.erase(s.gpu);
      return created.status();
    }
    stream = *created;
  }
  absl::Status st = backend.BatchCopyAsync(stream, regions.data(), static_cast<int>(n));
  if (st.ok()) st = backend.SynchronizeStream(stream);
  if (!st.ok()) return st;
  return staged;
}

proto::AllocHeader NodeInventory::ReadHeader(size_t index, uint64_t offset) const {
  const SegmentSpan& s = (*segments_)[index];
  proto::AllocHeader h;
  h.magic = std::atomic_ref<uint64_t>(*WordAt(s, offset, 0)).load(std::memory_order_acquire);
  h.generation = std::atomic_ref<uint64_t>(*WordAt(s, offset, 1)).load(std::memory_order_acquire);
  h.key_hash = std::atomic_ref<uint64_t>(*WordAt(s, offset, 2)).load(std::memory_order_acquire);
  h.value_length = std::atomic_ref<uint64_t>(*WordAt(s, offset, 3)).load(std::memory_order_acquire);
  return h;
}

void NodeInventory::InvalidateHeader(size_t index, uint64_t offset, uint64_t generation) {
  const SegmentSpan& s = (*segments_)[index];
  if (s.tier == proto::Tier::kGpu) {
    const device::CasOp64 op{reinterpret_cast<void*>(s.base + offset + sizeof(uint64_t)),
                             generation, 0};
    if (absl::Status st = device::ActiveKernels().CompareExchange64(s.gpu, &op, 1); !st.ok()) {
      ++gpu_errors_;
      GRANARY_LOG_WARN << "inventory: invalidating the header at offset " << offset
                       << " of GPU segment '" << s.name << "' failed: " << st;
    }
    return;
  }
  uint64_t expected = generation;
  std::atomic_ref<uint64_t>(*WordAt((*segments_)[index], offset, 1))
      .compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
}

uint32_t NodeInventory::TenantIdLocked(const std::string& tenant) {
  auto [it, fresh] = tenant_ids_.try_emplace(tenant, static_cast<uint32_t>(tenants_.size()));
  if (fresh) tenants_.push_back(tenant);
  return it->second;
}

bool NodeInventory::Apply(size_t index, const proto::InventoryRecord& r) {
  if (index >= segments_->size()) return false;
  const SegmentSpan& s = (*segments_)[index];
  // The header must lie inside the segment, aligned (the CAS and the loads need 8 bytes).
  if (r.offset % proto::kAllocAlignment != 0 || r.alloc_size < proto::kAllocHeaderSize ||
      !common::OffsetWithin(s.size, r.offset, r.alloc_size)) {
    return false;
  }
  const Slot slot{static_cast<uint32_t>(index), r.offset};
  granary::common::MutexLock lock(&mu_);
  if (r.op == proto::InventoryOp::kFree) {
    auto it = entries_.find(slot);
    if (it == entries_.end() || it->second.generation != r.generation) return false;
    entries_.erase(it);
    ++layout_changes_;
    // A disk record has no header in memory; the journal's free keeps it from coming back.
    if (s.tier != proto::Tier::kDisk) InvalidateHeader(index, r.offset, r.generation);
    Journal(index, r);
    return true;
  }
  auto [it, fresh] = entries_.try_emplace(slot);
  if (fresh) ++layout_changes_;
  if (!fresh && it->second.generation > r.generation) return false;
  Journal(index, r);
  Entry& e = it->second;
  e.key = r.key;
  e.alloc_size = r.alloc_size;
  e.value_length = r.value_length;
  e.generation = r.generation;
  e.commit_ms = r.commit_ms;
  e.flags = r.flags;
  e.tenant = TenantIdLocked(r.tenant);
  return true;
}

void NodeInventory::Journal(size_t index, const proto::InventoryRecord& r) {
  if (!journaling_) return;
  unflushed_.push_back(r);
  unflushed_.back().segment_id = index;  // the journal names segments by the node's index
}

size_t NodeInventory::Adopt(std::unique_ptr<InventoryJournal> journal,
                            const InventoryJournal::Replay& replay) {
  size_t taken = 0;
  for (const proto::InventoryRecord& r : replay.live) {
    if (r.op == proto::InventoryOp::kCommit && Apply(r.segment_id, r)) ++taken;
  }
  journal_records_ = replay.records;
  journal_ = std::move(journal);
  granary::common::MutexLock lock(&mu_);
  journaling_ = true;
  return taken;
}

absl::Status NodeInventory::Flush() {
  if (journal_ == nullptr) return absl::OkStatus();
  std::vector<proto::InventoryRecord> records;
  uint64_t live = 0;
  {
    granary::common::MutexLock lock(&mu_);
    records.swap(unflushed_);
    live = entries_.size();
  }
  if (journal_records_ + records.size() > 2 * live + kCompactSlack) {
    // The log has grown well past what it describes: rewrite it as the live set (which already
    // holds what `records` say).
    std::vector<proto::InventoryRecord> snapshot;
    {
      granary::common::MutexLock lock(&mu_);
      snapshot.reserve(entries_.size());
      for (const auto& [slot, e] : entries_) {
        proto::InventoryRecord& r = snapshot.emplace_back();
        r.op = proto::InventoryOp::kCommit;
        r.tenant = tenants_[e.tenant];
        r.key = e.key;
        r.segment_id = slot.first;
        r.offset = slot.second;
        r.alloc_size = e.alloc_size;
        r.value_length = e.value_length;
        r.generation = e.generation;
        r.flags = e.flags;
        r.commit_ms = e.commit_ms;
      }
    }
    GRANARY_RETURN_IF_ERROR(journal_->Compact(snapshot));
    journal_records_ = snapshot.size();
    return absl::OkStatus();
  }
  if (records.empty()) return absl::OkStatus();
  GRANARY_RETURN_IF_ERROR(journal_->Append(records));
  journal_records_ += records.size();
  return journal_->Sync();
}

std::vector<std::vector<proto::InventoryRecord>> NodeInventory::Report(
    const std::vector<uint64_t>& ids, size_t max_records, size_t max_bytes) {
  std::vector<std::vector<proto::InventoryRecord>> batches;
  ReportCursor cursor = BeginReport();
  while (true) {
    std::vector<proto::InventoryRecord> batch = NextBatch(&cursor, ids, max_records, max_bytes);
    if (batch.empty()) break;
    batches.push_back(std::move(batch));
  }
  return batches;
}

NodeInventory::ReportCursor NodeInventory::BeginReport() const {
  ReportCursor c;
  granary::common::MutexLock lock(&mu_);
  // Per segment, in ascending offset order: the master's allocator reserves those in O(1).
  c.slots.resize(segments_->size());
  for (const auto& [slot, e] : entries_) c.slots[slot.first].push_back({slot.second, &e});
  for (std::vector<ReportCursor::At>& v : c.slots) std::sort(v.begin(), v.end());
  c.total = entries_.size();
  c.layout = layout_changes_;
  return c;
}

// How many entries ahead NextBatch asks for (about the misses a core keeps in flight).
constexpr size_t kPrefetchAhead = 12;

std::vector<proto::InventoryRecord> NodeInventory::NextBatch(ReportCursor* c,
                                                             const std::vector<uint64_t>& ids,
                                                             size_t max_records, size_t max_bytes) {
  std::vector<proto::InventoryRecord> batch;
  size_t bytes = 0;
  granary::common::MutexLock lock(&mu_);
  const bool in_place = layout_changes_ == c->layout;
  // A GPU segment's headers for v[gpu_from, gpu_from + gpu_n), read ahead in one device copy.
  // (They stay in the pinned buffer, which only this call, holding mu_, uses.)
  absl::StatusOr<const proto::AllocHeader*> gpu = nullptr;
  size_t gpu_from = 0, gpu_n = 0;
  // A disk tier's headers for v[disk_from, disk_from + disk_n), read ahead in one batch.
  proto::AllocHeader disk[kDiskHeaderChunk];
  bool disk_ok[kDiskHeaderChunk];
  size_t disk_from = 0, disk_n = 0;
  for (; c->index < c->slots.size(); ++c->index, c->pos = 0) {
    const size_t index = c->index;
    const std::vector<ReportCursor::At>& v = c->slots[index];
    const uint64_t id = index < ids.size() ? ids[index] : 0;
    const bool on_gpu = (*segments_)[index].tier == proto::Tier::kGpu;
    const bool on_disk = (*segments_)[index].tier == proto::Tier::kDisk;
    gpu_n = 0;
    disk_n = 0;
    for (; c->pos < v.size(); ++c->pos) {
      if (batch.size() >= max_records || bytes >= max_bytes) return batch;
      const uint64_t offset = v[c->pos].offset;
      const Slot slot{static_cast<uint32_t>(index), offset};
      const Entry* found = v[c->pos].entry;
      // The entries lie in the table's order, not in offsets': each is a cache (and TLB) miss.
      // Asking for one a few ahead keeps several misses in flight instead of one at a time.
      if (in_place && c->pos + kPrefetchAhead < v.size()) {
        __builtin_prefetch(v[c->pos + kPrefetchAhead].entry);
      }
      if (!in_place) {
        auto it = entries_.find(slot);
        if (it == entries_.end()) continue;  // freed since BeginReport
        found = &it->second;
      }
      const Entry& e = *found;
      if (on_gpu && (gpu_n == 0 || c->pos >= gpu_from + gpu_n)) {
        gpu_from = c->pos;
        gpu_n = std::min(kGpuHeaderChunk, v.size() - c->pos);
        uint64_t offsets[kGpuHeaderChunk];
        for (size_t i = 0; i < gpu_n; ++i) offsets[i] = v[gpu_from + i].offset;
        gpu = ReadGpuHeaders(index, offsets, gpu_n);
        if (!gpu.ok()) {
          GRANARY_LOG_WARN << "inventory: reading " << gpu_n << " header(s) of GPU segment '"
                           << (*segments_)[index].name
                           << "' failed, not reporting them: " << gpu.status();
        }
      }
      if (on_disk && (disk_n == 0 || c->pos >= disk_from + disk_n)) {
        disk_from = c->pos;
        disk_n = std::min(kDiskHeaderChunk, v.size() - c->pos);
        uint64_t offsets[kDiskHeaderChunk];
        for (size_t i = 0; i < disk_n; ++i) offsets[i] = v[disk_from + i].offset;
        std::fill(disk_ok, disk_ok + disk_n, false);
        if (disk_header_) disk_header_(index, offsets, disk_n, disk, disk_ok);
      }
      const bool read = on_disk ? disk_ok[c->pos - disk_from] : !on_gpu || gpu.ok();
      const proto::AllocHeader h = on_disk
                                       ? (read ? disk[c->pos - disk_from] : proto::AllocHeader{})
                                   : !on_gpu ? ReadHeader(index, offset)
                                   : read    ? (*gpu)[c->pos - gpu_from]
                                             : proto::AllocHeader{};
      if (!read ||
          !proto::CheckAllocHeader(h, e.generation, common::HashBytes(e.key), e.value_length)
               .ok()) {
        ++mismatches_;
        entries_.erase(slot);  // moves no other entry
        continue;
      }
      if (id == 0) continue;
      proto::InventoryRecord& r = batch.emplace_back();
      r.op = proto::InventoryOp::kCommit;
      r.tenant = tenants_[e.tenant];
      r.key = e.key;
      r.segment_id = id;
      r.offset = offset;
      r.alloc_size = e.alloc_size;
      r.value_length = e.value_length;
      r.generation = e.generation;
      r.flags = e.flags;
      r.commit_ms = e.commit_ms;
      bytes += 64 + r.tenant.size() + r.key.size();
    }
  }
  return batch;
}

size_t NodeInventory::size() const {
  granary::common::MutexLock lock(&mu_);
  return entries_.size();
}

uint64_t NodeInventory::mismatches() const {
  granary::common::MutexLock lock(&mu_);
  return mismatches_;
}

uint64_t NodeInventory::gpu_errors() const {
  granary::common::MutexLock lock(&mu_);
  return gpu_errors_;
}

}  // namespace granary::node
