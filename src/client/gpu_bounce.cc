#include "client/gpu_bounce.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/slot_chunks.h"
#include "common/status_macros.h"
#include "cuda/device_backend.h"
#include "proto/alloc_header.h"

namespace granary::client {

namespace {

// Copies n bytes between host memory and `device`'s memory (-1: both host).
absl::Status CopyLocal(int device, void* dst, const void* src, size_t n) {
  if (device < 0) {
    std::memcpy(dst, src, n);
    return absl::OkStatus();
  }
  absl::Status st = cuda::ActiveBackend().Copy(device, dst, src, n, cuda::CopyKind::kDefault);
  if (st.ok()) return st;
  return absl::InternalError(
      absl::StrCat("a device copy (device ", device,
                   ") for a staged GPU-segment transfer failed: ", st.message()));
}

}  // namespace

GpuBounce::GpuBounce(MetricsRegistry* metrics, Registrations* registrations)
    : registrations_(registrations),
      values_(metrics->Counter(
          "granary_client_gpu_bounced_values_total",
          "Values moved to or from GPU segments this client cannot map (another host, or an IPC "
          "open that failed), staged by the node")),
      retired_(metrics->Counter(
          "granary_client_gpu_bounce_slots_retired_total",
          "Bounce slots never reused because a staged transfer through them failed (a late "
          "write of the node could still land in them)")) {}

GpuBounce::~GpuBounce() {
  std::vector<Slot> idle;
  {
    granary::MutexLock lock(&mu_);
    idle.swap(idle_);
  }
  for (Slot& s : idle) FreeSlot(s);
  // retired_slots_ stay allocated and registered: a late write may still be on its way, and the
  // registrations go with the client.
}

absl::StatusOr<GpuBounce::Slot> GpuBounce::TakeSlot() {
  {
    granary::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      Slot s = idle_.back();
      idle_.pop_back();
      return s;
    }
  }
  Slot s;
  // Pinned when a device backend can pin (faster device copies), else plain host memory.
  absl::StatusOr<void*> pinned = cuda::ActiveBackend().HostAllocPinned(kSlotBytes);
  if (pinned.ok()) {
    s.data = static_cast<unsigned char*>(*pinned);
    s.pinned = true;
  } else {
    s.data = static_cast<unsigned char*>(std::aligned_alloc(4096, kSlotBytes));
    if (s.data == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no memory for a ", kSlotBytes, "-byte bounce slot"));
    }
  }
  if (absl::Status st = registrations_->Register(s.data, kSlotBytes); !st.ok()) {
    if (s.pinned) {
      cuda::ActiveBackend().HostFreePinned(s.data);
    } else {
      std::free(s.data);
    }
    return absl::Status(st.code(), absl::StrCat("registering a bounce slot: ", st.message()));
  }
  return s;
}

void GpuBounce::ReturnSlot(Slot s) {
  granary::MutexLock lock(&mu_);
  idle_.push_back(s);
}

void GpuBounce::FreeSlot(Slot s) {
  if (absl::Status st = registrations_->Unregister(s.data); !st.ok()) {
    LOG_WARN << "unregistering a bounce slot failed: " << st;
  }
  if (s.pinned) {
    cuda::ActiveBackend().HostFreePinned(s.data);
  } else {
    std::free(s.data);
  }
}

absl::Status GpuBounce::Run(std::vector<transport::RmaOp> ops, uint32_t node_timeout_ms,
                            const PushFn& push, const FetchFn& fetch) {
  if (ops.empty()) return absl::OkStatus();
  // Per node, in order.
  std::vector<std::pair<std::string, std::vector<transport::RmaOp>>> groups;
  for (transport::RmaOp& op : ops) {
    const std::string& node = op.segment->node_address;
    auto g =
        std::find_if(groups.begin(), groups.end(), [&](const auto& p) { return p.first == node; });
    if (g == groups.end()) g = groups.insert(groups.end(), {node, {}});
    g->second.push_back(std::move(op));
  }
  GRANARY_ASSIGN_OR_RETURN(Slot slot, TakeSlot());
  absl::Status st;
  {
    Registrations::Pins pins(registrations_);
    const RegisteredRange range = registrations_->Lookup(slot.data, kSlotBytes, &pins);
    if (!range.registered()) {
      st = absl::InternalError("a bounce slot is not registered");
    } else {
      const proto::SegmentInfo target = registrations_->PushTarget(range);
      for (auto& [node, group] : groups) {
        std::vector<transport::RmaOp> gets =
            transport::TakeOps(&group, [](const transport::RmaOp& op) { return !op.is_put; });
        st = RunGets(node, gets, slot.data, target, node_timeout_ms, push);
        if (st.ok()) st = RunPuts(node, group, slot.data, target, node_timeout_ms, fetch);
        if (!st.ok()) break;
      }
    }
  }
  if (st.ok()) {
    ReturnSlot(slot);
  } else {
    // A node that missed its deadline may still write into the slot later (a stalled node that
    // resumes runs the request it had queued): never reuse it. Kept registered, and never
    // freed while this client lives.
    retired_->Inc();
    LOG_WARN << "retiring a " << kSlotBytes
             << "-byte GPU bounce slot after a failed transfer: " << st;
    granary::MutexLock lock(&mu_);
    retired_slots_.push_back(slot);
  }
  return st;
}

absl::Status GpuBounce::RunGets(const std::string& node, const std::vector<transport::RmaOp>& ops,
                                unsigned char* slot, const proto::SegmentInfo& target,
                                uint32_t timeout_ms, const PushFn& push) {
  if (ops.empty()) return absl::OkStatus();
  std::vector<const transport::RmaOp*> values, headers;
  std::vector<uint64_t> lengths;
  for (const transport::RmaOp& op : ops) {
    if (op.header) {
      headers.push_back(&op);
    } else {
      values.push_back(&op);
      lengths.push_back(op.length);
    }
  }
  std::vector<std::vector<SlotPart>> chunks = PackIntoSlots(lengths, kSlotBytes);
  if (chunks.empty()) chunks.emplace_back();  // headers only
  for (size_t k = 0; k < chunks.size(); ++k) {
    proto::PushRequest req;
    req.dest = target;
    req.timeout_ms = timeout_ms;
    for (const SlotPart& p : chunks[k]) {
      req.entries.push_back({values[p.item]->remote_addr + p.offset,
                             reinterpret_cast<uint64_t>(slot + p.slot_offset), p.length});
    }
    const bool last = k + 1 == chunks.size();
    if (last) {
      for (const transport::RmaOp* h : headers) req.headers.push_back(h->remote_addr);
    }
    absl::StatusOr<std::string> got = push(node, req);
    if (!got.ok()) return got.status();
    for (const SlotPart& p : chunks[k]) {
      const transport::RmaOp& v = *values[p.item];
      GRANARY_RETURN_IF_ERROR(CopyLocal(v.device, static_cast<unsigned char*>(v.local) + p.offset,
                                        slot + p.slot_offset, p.length));
    }
    if (!last) continue;
    if (got->size() != headers.size() * proto::kAllocHeaderSize) {
      return absl::InternalError(absl::StrCat("node ", node, " returned ", got->size(),
                                              " header bytes for ", headers.size(), " headers"));
    }
    for (size_t j = 0; j < headers.size(); ++j) {
      std::memcpy(headers[j]->local, got->data() + j * proto::kAllocHeaderSize,
                  proto::kAllocHeaderSize);
    }
  }
  values_->Inc(values.size());
  return absl::OkStatus();
}

absl::Status GpuBounce::RunPuts(const std::string& node, const std::vector<transport::RmaOp>& ops,
                                unsigned char* slot, const proto::SegmentInfo& target,
                                uint32_t timeout_ms, const FetchFn& fetch) {
  auto send = [&](uint64_t dest, uint64_t length) {
    proto::FetchRequest req;
    req.source = target;
    req.source_address = reinterpret_cast<uint64_t>(slot);
    req.dest_address = dest;
    req.length = length;
    req.timeout_ms = timeout_ms;
    return fetch(node, req);
  };
  size_t values = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const transport::RmaOp& op = ops[i];
    values += op.header ? 0 : 1;
    // A value followed by its own header: one Fetch of [header | value] when it fits.
    if (!op.header && i + 1 < ops.size() && ops[i + 1].header && ops[i + 1].segment == op.segment &&
        ops[i + 1].remote_addr + proto::kAllocHeaderSize == op.remote_addr &&
        op.length + proto::kAllocHeaderSize <= kSlotBytes) {
      GRANARY_RETURN_IF_ERROR(CopyLocal(-1, slot, ops[i + 1].local, proto::kAllocHeaderSize));
      GRANARY_RETURN_IF_ERROR(
          CopyLocal(op.device, slot + proto::kAllocHeaderSize, op.local, op.length));
      GRANARY_RETURN_IF_ERROR(send(ops[i + 1].remote_addr, op.length + proto::kAllocHeaderSize));
      ++i;
      continue;
    }
    for (uint64_t off = 0; off < op.length; off += kSlotBytes) {
      const uint64_t n = std::min<uint64_t>(kSlotBytes, op.length - off);
      GRANARY_RETURN_IF_ERROR(
          CopyLocal(op.device, slot, static_cast<const unsigned char*>(op.local) + off, n));
      GRANARY_RETURN_IF_ERROR(send(op.remote_addr + off, n));
    }
  }
  values_->Inc(values);
  return absl::OkStatus();
}

}  // namespace granary::client
