#include "client/device_transfers.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/engine_order.h"
#include "common/log.h"
#include "common/slot_chunks.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "proto/alloc_header.h"

namespace granary::client {

common::MetricCounter* GpuTransfersCounter(common::MetricsRegistry* metrics, const char* path) {
  return metrics->Counter("granary_client_gpu_transfers_total",
                          "Values moved to or from this client's device buffers, by path (ipc, "
                          "host_segment, staging)",
                          {{"path", path}});
}

DeviceTransfers::DeviceTransfers(common::MetricsRegistry* metrics, transport::RmaEngine* rma,
                                 uint64_t pin_cap)
    : rma_(rma),
      pin_cap_(pin_cap),
      host_segment_(GpuTransfersCounter(metrics, "host_segment")),
      staging_(GpuTransfersCounter(metrics, "staging")),
      pin_failures_(metrics->Counter(
          "granary_client_gpu_pin_failures_total",
          "Pieces of mapped node memory the device backend would not pin (copied pageable)")),
      pinned_gauge_(metrics->Gauge("granary_client_gpu_pinned_node_bytes",
                                   "Mapped node memory this client pinned for device copies")) {}

DeviceTransfers::~DeviceTransfers() {
  std::vector<Slots> slots;
  std::map<uintptr_t, Piece> pinned;
  {
    granary::common::MutexLock lock(&mu_);
    slots.swap(idle_slots_);
    pinned.swap(pinned_);
  }
  for (Slots& s : slots) {
    for (unsigned char* p : s.slot) s.backend->HostFreePinned(p);
  }
  // Pinned node memory whose mapping is still there (the engine outlives this object only in
  // ClientImpl's teardown order, where the mappings go after it).
  for (auto& [start, piece] : pinned) {
    if (piece.backend != nullptr)
      (void)piece.backend->HostUnregister(reinterpret_cast<void*>(start));
  }
}

bool DeviceTransfers::AnyDevice(const std::vector<transport::RmaOp>& ops) {
  for (const transport::RmaOp& op : ops) {
    if (op.device >= 0) return true;
  }
  return false;
}

uint64_t DeviceTransfers::pinned_bytes() const {
  granary::common::MutexLock lock(&mu_);
  return pinned_bytes_;
}

void DeviceTransfers::Unmapped(void* local, uint64_t size) {
  const auto begin = reinterpret_cast<uintptr_t>(local);
  std::vector<std::pair<uintptr_t, Piece>> gone;
  {
    granary::common::MutexLock lock(&mu_);
    for (auto it = pinned_.lower_bound(begin); it != pinned_.end() && it->first < begin + size;) {
      if (it->second.backend != nullptr || it->second.pending) pinned_bytes_ -= it->second.bytes;
      gone.emplace_back(*it);
      it = pinned_.erase(it);
    }
    pinned_gauge_->Set(static_cast<double>(pinned_bytes_));
  }
  for (auto& [start, piece] : gone) {
    if (piece.backend == nullptr) continue;  // a piece that failed to pin
    if (absl::Status st = piece.backend->HostUnregister(reinterpret_cast<void*>(start)); !st.ok()) {
      GRANARY_LOG_WARN << "unpinning node memory at " << reinterpret_cast<void*>(start) << ": "
                       << st;
    }
  }
}

absl::StatusOr<DeviceTransfers::Slots> DeviceTransfers::TakeSlots(device::DeviceRuntime* backend) {
  {
    granary::common::MutexLock lock(&mu_);
    for (size_t i = 0; i < idle_slots_.size(); ++i) {
      if (idle_slots_[i].backend == backend) {
        Slots s = idle_slots_[i];
        idle_slots_.erase(idle_slots_.begin() + static_cast<ptrdiff_t>(i));
        return s;
      }
    }
  }
  Slots s;
  s.backend = backend;
  for (unsigned char*& p : s.slot) {
    absl::StatusOr<void*> m = backend->HostAllocPinned(kSlotBytes);
    if (!m.ok()) {
      for (unsigned char* q : s.slot) backend->HostFreePinned(q);
      return absl::Status(m.status().code(),
                          absl::StrCat("allocating a pinned staging slot of ", kSlotBytes,
                                       " bytes: ", m.status().message()));
    }
    p = static_cast<unsigned char*>(*m);
  }
  return s;
}

void DeviceTransfers::ReturnSlots(Slots s) {
  granary::common::MutexLock lock(&mu_);
  idle_slots_.push_back(s);
}

absl::Status DeviceTransfers::Run(std::vector<transport::RmaOp>* ops, int64_t timeout_ms,
                                  const RemoteFn& remote, EngineOrder* order) {
  // 1. Mapped segments (same host, shared memory): device copies straight from node memory.
  std::vector<transport::MappedOp> headers;
  absl::Status st = rma_->RunMapped(
      ops, [](const transport::RmaOp& op) { return op.device >= 0 || (op.header && !op.is_put); },
      [&](std::vector<transport::MappedOp>& taken) {
        std::vector<transport::MappedOp> values;
        for (transport::MappedOp& m : taken) {
          (m.op.device >= 0 ? values : headers).push_back(std::move(m));
        }
        return RunMapped(values, headers, order);
      });
  if (!st.ok()) return st;
  // 2. The rest of the device-local ops: UCX itself where it handles CUDA memory, else staging.
  if (direct_ucx_ != nullptr) {
    size_t values = 0;
    for (const transport::RmaOp& op : *ops) values += op.device >= 0 && !op.header;
    direct_ucx_->Inc(values);
    return absl::OkStatus();
  }
  std::vector<transport::RmaOp> staged =
      transport::TakeOps(ops, [](const transport::RmaOp& op) { return op.device >= 0; });
  if (staged.empty()) return absl::OkStatus();
  return RunStaged(staged, timeout_ms, remote, order);
}

absl::Status DeviceTransfers::RunMapped(std::vector<transport::MappedOp>& values,
                                        std::vector<transport::MappedOp>& headers,
                                        EngineOrder* order) {
  // The headers first, by the CPU from the mapping (as RmaEngine::CopyMapped would).
  for (const transport::MappedOp& h : headers) {
    std::memcpy(h.op.local, h.mapped, h.op.length);
  }
  if (values.empty()) return absl::OkStatus();
  device::DeviceRuntime* backend = &device::ActiveRuntime();
  // Pin the pieces of node memory the values touch, lazily, under the cap.
  for (const transport::MappedOp& m : values) {
    const auto base = reinterpret_cast<uintptr_t>(m.mapped_base);
    const auto at = reinterpret_cast<uintptr_t>(m.mapped);
    const uint64_t first = (at - base) / kPinPiece;
    const uint64_t last = (at + m.op.length - 1 - base) / kPinPiece;
    for (uint64_t k = first; k <= last; ++k) {
      const uintptr_t start = base + k * kPinPiece;
      const uint64_t bytes = std::min<uint64_t>(kPinPiece, m.mapped_size - k * kPinPiece);
      {
        // The piece is claimed (pending, its bytes held against the cap) before the slow
        // registration, so that a second thread neither registers it too (and fails) nor
        // unregisters it: it copies pageable for this batch instead.
        granary::common::MutexLock lock(&mu_);
        if (pinned_.contains(start)) continue;
        if (pinned_bytes_ + bytes > pin_cap_) continue;  // past the cap: pageable copies
        pinned_[start] = Piece{bytes, nullptr, /*pending=*/true};
        pinned_bytes_ += bytes;
      }
      absl::Status pst = backend->HostRegister(reinterpret_cast<void*>(start), bytes);
      granary::common::MutexLock lock(&mu_);
      auto it = pinned_.find(start);
      if (it == pinned_.end() || !it->second.pending) {  // unmapped meanwhile (Unmapped)
        if (pst.ok()) (void)backend->HostUnregister(reinterpret_cast<void*>(start));
        continue;
      }
      it->second.pending = false;
      if (!pst.ok()) {
        // Remembered, so a piece that cannot be pinned is not tried on every copy.
        pin_failures_->Inc();
        GRANARY_LOG_WARN << "pinning " << bytes
                         << " bytes of node memory for device copies failed (the "
                         << "copies read pageable memory, slower): " << pst;
        pinned_bytes_ -= bytes;
        pinned_gauge_->Set(static_cast<double>(pinned_bytes_));
        continue;
      }
      it->second.backend = backend;
      pinned_gauge_->Set(static_cast<double>(pinned_bytes_));
    }
  }
  std::vector<device::CopyRegion> regions;
  regions.reserve(values.size());
  for (const transport::MappedOp& m : values) {
    if (m.op.is_put) {
      regions.push_back({m.op.local, m.mapped, m.op.length});
    } else {
      regions.push_back({m.mapped, m.op.local, m.op.length});
    }
  }
  GRANARY_ASSIGN_OR_RETURN(StreamPool::Stream stream,
                           streams_.Take(backend, values.front().op.device));
  absl::Status st = order == nullptr ? absl::OkStatus() : order->Before(stream.handle);
  if (st.ok()) {
    st = backend->BatchCopyAsync(stream.handle, regions.data(), static_cast<int>(regions.size()));
  }
  absl::Status synced = backend->SynchronizeStream(stream.handle);
  if (st.ok()) st = synced;
  streams_.Return(stream, st.ok());
  if (!st.ok()) {
    return absl::InternalError(absl::StrCat("a device copy from node ",
                                            values.front().op.segment->node_address,
                                            "'s memory failed: ", st.message()));
  }
  host_segment_->Inc(values.size());
  // The fence: each get header, read before the values, must be what it is after them.
  for (const transport::MappedOp& h : headers) {
    if (std::memcmp(h.op.local, h.mapped, h.op.length) != 0) {
      return absl::UnavailableError(absl::StrCat(
          "a replica header on segment ", h.op.segment->segment_id, " of node ",
          h.op.segment->node_address,
          " changed during a device read (the object was replaced or removed); retry"));
    }
  }
  return absl::OkStatus();
}

namespace {

// One staged call's pipeline: the chunks of its ops through two slots, each chunk's device
// copies enqueued on one stream and marked by its slot's event. device_error() tells a failed
// device call from a failed remote transfer.
class StagedPipeline {
 public:
  StagedPipeline(std::vector<transport::RmaOp>& ops,
                 const std::vector<std::vector<common::SlotPart>>& chunks,
                 unsigned char* const slots[2], device::DeviceRuntime* backend, void* stream,
                 void* const events[2], std::chrono::steady_clock::time_point deadline)
      : ops_(ops),
        chunks_(chunks),
        slots_{slots[0], slots[1]},
        backend_(backend),
        stream_(stream),
        events_{events[0], events[1]},
        deadline_(deadline) {}

  // Device -> slot of chunk k+1 overlaps the write of chunk k.
  absl::Status Put(const DeviceTransfers::RemoteFn& remote) {
    absl::Status st = Enqueue(0, /*to_slot=*/true);
    for (size_t k = 0; st.ok() && k < chunks_.size(); ++k) {
      if (k + 1 < chunks_.size()) st = Enqueue(k + 1, true);
      if (st.ok()) st = Wait(k);
      if (st.ok()) st = remote(RmaOf(k), LeftMs());
    }
    return st;
  }

  // The read of chunk k+1 overlaps slot -> device of chunk k. A slot is read into again only
  // after its previous copy (chunk k-2) completed.
  absl::Status Get(const DeviceTransfers::RemoteFn& remote) {
    absl::Status st;
    for (size_t k = 0; st.ok() && k < chunks_.size(); ++k) {
      if (k >= 2) st = Wait(k - 2);
      if (st.ok()) st = remote(RmaOf(k), LeftMs());
      if (st.ok()) st = Enqueue(k, /*to_slot=*/false);
    }
    return st;
  }

  // Nothing may still copy into or out of the slots when they go back to the pool.
  absl::Status Synchronize() {
    absl::Status s = backend_->SynchronizeStream(stream_);
    if (!s.ok()) device_error_ = true;
    return s;
  }

  bool device_error() const { return device_error_; }

 private:
  // The device side of chunk k's parts, as copy regions (to the slot for a put, from it for a
  // get).
  std::vector<device::CopyRegion> RegionsOf(size_t k, bool to_slot) const {
    std::vector<device::CopyRegion> r;
    unsigned char* slot = slots_[k % 2];
    for (const common::SlotPart& p : chunks_[k]) {
      auto* dev = static_cast<unsigned char*>(ops_[p.item].local) + p.offset;
      if (to_slot) {
        r.push_back({dev, slot + p.slot_offset, p.length});
      } else {
        r.push_back({slot + p.slot_offset, dev, p.length});
      }
    }
    return r;
  }
  // Chunk k's one-sided ops against its slot.
  std::vector<transport::RmaOp> RmaOf(size_t k) const {
    std::vector<transport::RmaOp> r;
    unsigned char* slot = slots_[k % 2];
    for (const common::SlotPart& p : chunks_[k]) {
      transport::RmaOp op = ops_[p.item];
      op.device = -1;
      op.memh = nullptr;
      op.local = slot + p.slot_offset;
      op.length = p.length;
      op.remote_addr += p.offset;
      r.push_back(std::move(op));
    }
    return r;
  }
  int64_t LeftMs() const {
    return std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline_ - std::chrono::steady_clock::now())
                                    .count());
  }
  absl::Status Enqueue(size_t k, bool to_slot) {
    std::vector<device::CopyRegion> r = RegionsOf(k, to_slot);
    absl::Status s = backend_->BatchCopyAsync(stream_, r.data(), static_cast<int>(r.size()));
    if (s.ok()) s = backend_->RecordEvent(events_[k % 2], stream_);
    if (!s.ok()) device_error_ = true;
    return s;
  }
  absl::Status Wait(size_t k) {
    absl::Status s = backend_->WaitEvent(events_[k % 2]);
    if (!s.ok()) device_error_ = true;
    return s;
  }

  const std::vector<transport::RmaOp>& ops_;
  const std::vector<std::vector<common::SlotPart>>& chunks_;
  unsigned char* const slots_[2];
  device::DeviceRuntime* const backend_;
  void* const stream_;
  void* const events_[2];
  const std::chrono::steady_clock::time_point deadline_;
  bool device_error_ = false;
};

}  // namespace

absl::Status DeviceTransfers::RunStaged(std::vector<transport::RmaOp>& ops, int64_t timeout_ms,
                                        const RemoteFn& remote, EngineOrder* order) {
  // Chunks of at most one slot: values split at slot size, small ones packed together.
  std::vector<uint64_t> lengths;
  lengths.reserve(ops.size());
  for (const transport::RmaOp& op : ops) lengths.push_back(op.length);
  const std::vector<std::vector<common::SlotPart>> chunks =
      common::PackIntoSlots(lengths, kSlotBytes);
  if (chunks.empty()) return absl::OkStatus();
  device::DeviceRuntime* backend = &device::ActiveRuntime();
  const int device = ops.front().device;
  GRANARY_ASSIGN_OR_RETURN(Slots slots, TakeSlots(backend));
  absl::StatusOr<StreamPool::Stream> stream = streams_.Take(backend, device);
  if (!stream.ok()) {
    ReturnSlots(slots);
    return stream.status();
  }
  void* events[2] = {nullptr, nullptr};
  absl::Status st;
  for (void*& e : events) {
    absl::StatusOr<void*> ev = backend->CreateEvent(device);
    if (!ev.ok()) {
      st = ev.status();
      break;
    }
    e = *ev;
  }
  StagedPipeline pipeline(ops, chunks, slots.slot, backend, stream->handle, events,
                          std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 1)));
  const bool is_put = ops.front().is_put;
  if (st.ok() && is_put && order != nullptr) st = order->Before(stream->handle);
  if (st.ok()) st = is_put ? pipeline.Put(remote) : pipeline.Get(remote);
  absl::Status synced = pipeline.Synchronize();
  if (st.ok()) st = synced;
  for (void* e : events) {
    if (e != nullptr) backend->DestroyEvent(e);
  }
  streams_.Return(*stream, !pipeline.device_error());
  ReturnSlots(slots);
  if (!st.ok()) {
    if (pipeline.device_error()) {
      return absl::InternalError(absl::StrCat("a staged device copy (",
                                              is_put ? "device to host" : "host to device",
                                              ", device ", device, ") failed: ", st.message()));
    }
    return st;
  }
  staging_->Inc(ops.size());
  return absl::OkStatus();
}

}  // namespace granary::client
