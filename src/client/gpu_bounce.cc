#include "client/gpu_bounce.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/slot_chunks.h"
#include "common/status_macros.h"
#include "device/device_backend.h"
#include "proto/alloc_header.h"

namespace granary::client {

absl::Status GpuBounce::CopyLocal(int device, void* dst, const void* src, size_t n) {
  if (device < 0) {
    std::memcpy(dst, src, n);
    return absl::OkStatus();
  }
  // On a stream of this client's own, taken from a pool per device, and waited for: never the
  // legacy default stream (a synchronous cudaMemcpy runs there), which would wait for an
  // engine's work on the device's blocking streams and make that work wait.
  device::DeviceRuntime& rt = device::ActiveRuntime();
  void* stream = nullptr;
  {
    granary::common::MutexLock lock(&mu_);
    std::vector<void*>& idle = idle_streams_[device];
    if (!idle.empty()) {
      stream = idle.back();
      idle.pop_back();
    }
  }
  absl::Status st;
  if (stream == nullptr) {
    absl::StatusOr<void*> created = rt.CreateStream(device);
    if (created.ok()) stream = *created;
    st = created.status();
  }
  if (st.ok()) {
    const device::CopyRegion region{src, dst, n};
    st = rt.BatchCopyAsync(stream, &region, 1);
    if (st.ok()) st = rt.SynchronizeStream(stream);
  }
  if (stream != nullptr) {
    granary::common::MutexLock lock(&mu_);
    idle_streams_[device].push_back(stream);
  }
  if (st.ok()) return st;
  return absl::InternalError(
      absl::StrCat("a device copy (device ", device,
                   ") for a staged GPU-segment transfer failed: ", st.message()));
}

GpuBounce::GpuBounce(common::MetricsRegistry* metrics, Registrations* registrations)
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
  absl::flat_hash_map<int, std::vector<void*>> streams;
  {
    granary::common::MutexLock lock(&mu_);
    idle.swap(idle_);
    streams.swap(idle_streams_);
  }
  for (Slot& s : idle) FreeSlot(s);
  for (const auto& [device, list] : streams) {
    for (void* stream : list) device::ActiveRuntime().DestroyStream(stream);
  }
  // retired_slots_ stay allocated and registered: a late write may still be on its way, and the
  // registrations go with the client.
}

absl::StatusOr<GpuBounce::Slot> GpuBounce::TakeSlot() {
  {
    granary::common::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      Slot s = idle_.back();
      idle_.pop_back();
      return s;
    }
  }
  Slot s;
  // Pinned when a device backend can pin (faster device copies), else plain host memory.
  absl::StatusOr<void*> pinned = device::ActiveRuntime().HostAllocPinned(kSlotBytes);
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
      device::ActiveRuntime().HostFreePinned(s.data);
    } else {
      std::free(s.data);
    }
    return absl::Status(st.code(), absl::StrCat("registering a bounce slot: ", st.message()));
  }
  return s;
}

void GpuBounce::ReturnSlot(Slot s) {
  granary::common::MutexLock lock(&mu_);
  idle_.push_back(s);
}

void GpuBounce::FreeSlot(Slot s) {
  if (absl::Status st = registrations_->Unregister(s.data); !st.ok()) {
    GRANARY_LOG_WARN << "unregistering a bounce slot failed: " << st;
  }
  if (s.pinned) {
    device::ActiveRuntime().HostFreePinned(s.data);
  } else {
    std::free(s.data);
  }
}

// The answers to a set of node calls made at once: the first error, and a Push's header bytes.
class GpuBounce::Flight {
 public:
  explicit Flight(size_t calls) : pending_(calls) {}
  void Answer(absl::Status st, std::string headers = {}) {
    granary::common::MutexLock lock(&mu_);
    if (!st.ok() && status_.ok()) status_ = std::move(st);
    if (!headers.empty()) headers_ = std::move(headers);
    --pending_;
  }
  // Every answer, or DEADLINE_EXCEEDED naming the node after timeout_ms.
  [[nodiscard]] absl::Status Wait(int64_t timeout_ms, const std::string& node, const char* what,
                                  std::string* headers = nullptr) {
    granary::common::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(this, &Flight::Done),
                              absl::Milliseconds(timeout_ms))) {
      return absl::DeadlineExceededError(absl::StrCat("node ", node, " did not answer ", pending_,
                                                      " staged ", what, " within ", timeout_ms,
                                                      " ms"));
    }
    if (headers != nullptr) *headers = std::move(headers_);
    return status_;
  }

 private:
  bool Done() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return pending_ == 0; }  // under mu_

  granary::common::Mutex mu_;
  size_t pending_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::string headers_ ABSL_GUARDED_BY(mu_);
};

// One Run: its deadlines and up to two slots, taken on first use.
struct GpuBounce::Job {
  explicit Job(Registrations* r) : pins(r) {}
  uint32_t node_timeout_ms = 0;
  int64_t timeout_ms = 0;
  Slot slots[2];
  bool taken[2] = {false, false};
  proto::SegmentInfo targets[2];  // the slots as a node sees them
  Registrations::Pins pins;
};

absl::StatusOr<unsigned char*> GpuBounce::JobSlot(Job* job, int i) {
  if (job->taken[i]) return job->slots[i].data;
  GRANARY_ASSIGN_OR_RETURN(job->slots[i], TakeSlot());
  job->taken[i] = true;
  const RegisteredRange range = registrations_->Lookup(job->slots[i].data, kSlotBytes, &job->pins);
  if (!range.registered()) return absl::InternalError("a bounce slot is not registered");
  job->targets[i] = registrations_->PushTarget(range);
  return job->slots[i].data;
}

absl::Status GpuBounce::Run(std::vector<transport::RmaOp> ops, uint32_t node_timeout_ms,
                            int64_t timeout_ms, const PushFn& push, const FetchFn& fetch) {
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
  Job job(registrations_);
  job.node_timeout_ms = node_timeout_ms;
  job.timeout_ms = timeout_ms;
  absl::Status st;
  for (auto& [node, group] : groups) {
    std::vector<transport::RmaOp> gets =
        transport::TakeOps(&group, [](const transport::RmaOp& op) { return !op.is_put; });
    st = RunGets(&job, node, gets, push);
    if (st.ok()) st = RunPuts(&job, node, group, fetch);
    if (!st.ok()) break;
  }
  job.pins.Release();
  for (int i = 0; i < 2; ++i) {
    if (!job.taken[i]) continue;
    if (st.ok()) {
      ReturnSlot(job.slots[i]);
      continue;
    }
    // A node that missed its deadline may still write into the slot later (a stalled node that
    // resumes runs the requests it had queued): never reuse it. Kept registered, and never
    // freed while this client lives.
    retired_->Inc();
    GRANARY_LOG_WARN << "retiring a " << kSlotBytes
                     << "-byte GPU bounce slot after a failed transfer: " << st;
    granary::common::MutexLock lock(&mu_);
    retired_slots_.push_back(job.slots[i]);
  }
  return st;
}

absl::Status GpuBounce::RunGets(Job* job, const std::string& node,
                                const std::vector<transport::RmaOp>& ops, const PushFn& push) {
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
  std::vector<std::vector<common::SlotPart>> chunks = common::PackIntoSlots(lengths, kSlotBytes);
  if (chunks.empty()) chunks.emplace_back();  // headers only
  // Chunk k goes to slot k % 2; the Push of chunk k+1 is sent before chunk k is copied out.
  auto send = [&](size_t k) -> absl::StatusOr<std::shared_ptr<Flight>> {
    GRANARY_ASSIGN_OR_RETURN(unsigned char* slot, JobSlot(job, static_cast<int>(k % 2)));
    proto::PushRequest req;
    req.dest = job->targets[k % 2];
    req.timeout_ms = job->node_timeout_ms;
    for (const common::SlotPart& p : chunks[k]) {
      req.entries.push_back({values[p.item]->remote_addr + p.offset,
                             reinterpret_cast<uint64_t>(slot + p.slot_offset), p.length});
    }
    if (k + 1 == chunks.size()) {
      for (const transport::RmaOp* h : headers) req.headers.push_back(h->remote_addr);
    }
    auto flight = std::make_shared<Flight>(1);
    push(node, req, [flight](absl::StatusOr<std::string> got) {
      if (got.ok()) {
        flight->Answer(absl::OkStatus(), std::move(*got));
      } else {
        flight->Answer(got.status());
      }
    });
    return flight;
  };
  GRANARY_ASSIGN_OR_RETURN(std::shared_ptr<Flight> current, send(0));
  for (size_t k = 0; k < chunks.size(); ++k) {
    std::string got;
    GRANARY_RETURN_IF_ERROR(current->Wait(job->timeout_ms, node, "push", &got));

    const bool last = k + 1 == chunks.size();
    if (!last) {
      GRANARY_ASSIGN_OR_RETURN(current, send(k + 1));
    }
    const unsigned char* slot = job->slots[k % 2].data;
    for (const common::SlotPart& p : chunks[k]) {
      const transport::RmaOp& v = *values[p.item];
      GRANARY_RETURN_IF_ERROR(CopyLocal(v.device, static_cast<unsigned char*>(v.local) + p.offset,
                                        slot + p.slot_offset, p.length));
    }
    if (!last) continue;
    if (got.size() != headers.size() * proto::kAllocHeaderSize) {
      return absl::InternalError(absl::StrCat("node ", node, " returned ", got.size(),
                                              " header bytes for ", headers.size(), " headers"));
    }
    for (size_t j = 0; j < headers.size(); ++j) {
      std::memcpy(headers[j]->local, got.data() + j * proto::kAllocHeaderSize,
                  proto::kAllocHeaderSize);
    }
  }
  values_->Inc(values.size());
  return absl::OkStatus();
}

namespace {

// Bytes of one op's local memory, copied into a slot.
struct Piece {
  const transport::RmaOp* op = nullptr;
  uint64_t offset = 0;
  uint64_t length = 0;
};
// One Fetch: `length` bytes at `slot_offset` of the slot, to `dest` in the node's segment.
struct Send {
  uint64_t slot_offset = 0;
  uint64_t dest = 0;
  uint64_t length = 0;
  absl::InlinedVector<Piece, 2> pieces;
};
// What one slot carries at a time.
struct Fill {
  std::vector<Send> sends;
  uint64_t bytes = 0;
};
// At most this many Fetches in flight per slot (many tiny values share one).
constexpr size_t kMaxSendsPerFill = 128;

void AddSend(std::vector<Fill>* fills, Send s, size_t slot_bytes) {
  if (fills->empty() || fills->back().bytes + s.length > slot_bytes ||
      fills->back().sends.size() == kMaxSendsPerFill) {
    fills->emplace_back();
  }
  Fill& f = fills->back();
  s.slot_offset = f.bytes;
  f.bytes += s.length;
  f.sends.push_back(std::move(s));
}

}  // namespace

absl::Status GpuBounce::RunPuts(Job* job, const std::string& node,
                                const std::vector<transport::RmaOp>& ops, const FetchFn& fetch) {
  if (ops.empty()) return absl::OkStatus();
  // Values (a value and its header together where they fit) first; the headers of split values
  // after every value has landed.
  std::vector<Fill> values, headers;
  size_t count = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const transport::RmaOp& op = ops[i];
    if (op.header) {
      AddSend(&headers, Send{0, op.remote_addr, op.length, {Piece{&op, 0, op.length}}}, kSlotBytes);
      continue;
    }
    ++count;
    if (i + 1 < ops.size() && ops[i + 1].header && ops[i + 1].segment == op.segment &&
        ops[i + 1].remote_addr + proto::kAllocHeaderSize == op.remote_addr &&
        op.length + proto::kAllocHeaderSize <= kSlotBytes) {
      const transport::RmaOp& h = ops[i + 1];
      AddSend(&values,
              Send{0,
                   h.remote_addr,
                   proto::kAllocHeaderSize + op.length,
                   {Piece{&h, 0, proto::kAllocHeaderSize}, Piece{&op, 0, op.length}}},
              kSlotBytes);
      ++i;
      continue;
    }
    for (uint64_t off = 0; off < op.length; off += kSlotBytes) {
      const uint64_t n = std::min<uint64_t>(kSlotBytes, op.length - off);
      AddSend(&values, Send{0, op.remote_addr + off, n, {Piece{&op, off, n}}}, kSlotBytes);
    }
  }
  for (const std::vector<Fill>* phase : {&values, &headers}) {
    // Fill k goes to slot k % 2, once the Fetches of fill k-2 are answered; the Fetches of
    // fill k-1 are in flight meanwhile.
    std::shared_ptr<Flight> flights[2];
    for (size_t k = 0; k < phase->size(); ++k) {
      const int i = static_cast<int>(k % 2);
      if (flights[i]) GRANARY_RETURN_IF_ERROR(flights[i]->Wait(job->timeout_ms, node, "fetch"));
      GRANARY_ASSIGN_OR_RETURN(unsigned char* slot, JobSlot(job, i));
      const Fill& fill = (*phase)[k];
      for (const Send& send : fill.sends) {
        uint64_t at = send.slot_offset;
        for (const Piece& p : send.pieces) {
          GRANARY_RETURN_IF_ERROR(
              CopyLocal(p.op->device, slot + at,
                        static_cast<const unsigned char*>(p.op->local) + p.offset, p.length));
          at += p.length;
        }
      }
      auto flight = std::make_shared<Flight>(fill.sends.size());
      flights[i] = flight;
      for (const Send& send : fill.sends) {
        proto::FetchRequest req;
        req.source = job->targets[i];
        req.source_address = reinterpret_cast<uint64_t>(slot + send.slot_offset);
        req.dest_address = send.dest;
        req.length = send.length;
        req.timeout_ms = job->node_timeout_ms;
        fetch(node, req, [flight](absl::Status st) { flight->Answer(std::move(st)); });
      }
    }
    for (const auto& f : flights) {
      if (f) GRANARY_RETURN_IF_ERROR(f->Wait(job->timeout_ms, node, "fetch"));
    }
  }
  values_->Inc(count);
  return absl::OkStatus();
}

}  // namespace granary::client
