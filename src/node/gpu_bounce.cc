#include "node/gpu_bounce.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/slot_chunks.h"
#include "common/status_macros.h"
#include "proto/alloc_header.h"

namespace granary::node {

struct GpuBounce::Job {
  bool push = false;
  PushJob push_job;
  PushDone push_done;
  FetchJob fetch_job;
  FetchDone fetch_done;
};

absl::StatusOr<std::unique_ptr<GpuBounce>> GpuBounce::Create(device::DeviceRuntime* backend,
                                                             transport::Context* ctx,
                                                             transport::RmaEngine* rma,
                                                             common::MetricsRegistry* metrics,
                                                             size_t slot_bytes) {
  if (slot_bytes < proto::kAllocHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat("bounce slot of ", slot_bytes, " bytes"));
  }
  std::unique_ptr<GpuBounce> b(new GpuBounce(backend, ctx, rma, metrics, slot_bytes));
  GRANARY_RETURN_IF_ERROR(b->AllocateSlots());
  b->worker_ = std::thread([p = b.get()] { p->Loop(); });
  return b;
}

GpuBounce::GpuBounce(device::DeviceRuntime* backend, transport::Context* ctx,
                     transport::RmaEngine* rma, common::MetricsRegistry* metrics, size_t slot_bytes)
    : backend_(backend),
      ctx_(ctx),
      rma_(rma),
      slot_bytes_(slot_bytes),
      pushes_(metrics->Counter("granary_node_gpu_bounce_total",
                               "Pushes and fetches of GPU segments staged through pinned slots",
                               {{"op", "push"}})),
      fetches_(metrics->Counter("granary_node_gpu_bounce_total",
                                "Pushes and fetches of GPU segments staged through pinned slots",
                                {{"op", "fetch"}})),
      failures_(metrics->Counter("granary_node_gpu_bounce_failures_total",
                                 "Staged pushes and fetches of GPU segments that failed")),
      bytes_(metrics->Counter("granary_node_gpu_bounce_bytes_total",
                              "Value bytes staged between GPU segments and clients")) {}

GpuBounce::~GpuBounce() {
  Stop();
  for (Streams& s : streams_) {
    for (void* e : s.events) {
      if (e != nullptr) backend_->DestroyEvent(e);
    }
    if (s.stream != nullptr) backend_->DestroyStream(s.stream);
  }
  FreeSlots();
}

absl::Status GpuBounce::AllocateSlots() {
  for (Slot& s : slots_) {
    absl::StatusOr<void*> p = backend_->HostAllocPinned(slot_bytes_);
    if (!p.ok()) {
      return absl::Status(p.status().code(), absl::StrCat("pinned bounce slot of ", slot_bytes_,
                                                          " bytes: ", p.status().message()));
    }
    s.data = static_cast<unsigned char*>(*p);
    auto region = transport::MemoryRegion::Create(ctx_, s.data, slot_bytes_);
    if (!region.ok()) {
      backend_->HostFreePinned(s.data);
      s.data = nullptr;
      return region.status();
    }
    s.region = *std::move(region);
  }
  return absl::OkStatus();
}

void GpuBounce::FreeSlots() {
  for (Slot& s : slots_) {
    s.region.reset();
    if (s.data != nullptr) backend_->HostFreePinned(s.data);
    s.data = nullptr;
  }
}

void GpuBounce::Push(PushJob job, PushDone done) {
  auto j = std::make_unique<Job>();
  j->push = true;
  j->push_job = std::move(job);
  j->push_done = std::move(done);
  Enqueue(std::move(j));
}

void GpuBounce::Fetch(FetchJob job, FetchDone done) {
  auto j = std::make_unique<Job>();
  j->fetch_job = std::move(job);
  j->fetch_done = std::move(done);
  Enqueue(std::move(j));
}

void GpuBounce::Enqueue(std::unique_ptr<Job> j) {
  {
    granary::common::MutexLock lock(&mu_);
    if (!stopping_) {
      queue_.push_back(std::move(j));
      return;
    }
  }
  Cancel(*j);
}

void GpuBounce::Cancel(Job& j) {
  if (j.push) {
    j.push_done(absl::CancelledError("the node is stopping"), {});
  } else {
    j.fetch_done(absl::CancelledError("the node is stopping"));
  }
}

void GpuBounce::Stop() {
  std::deque<std::unique_ptr<Job>> left;
  {
    granary::common::MutexLock lock(&mu_);
    stopping_ = true;
    left.swap(queue_);
  }
  if (worker_.joinable()) worker_.join();
  for (auto& j : left) Cancel(*j);
}

void GpuBounce::Loop() {
  for (;;) {
    std::unique_ptr<Job> j;
    {
      granary::common::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      while (!mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(10))) {
      }
      if (stopping_) return;
      j = std::move(queue_.front());
      queue_.pop_front();
    }
    if (j->push) {
      std::string headers;
      absl::Status st = slots_[0].data == nullptr ? AllocateSlots() : absl::OkStatus();
      if (st.ok()) st = RunPush(j->push_job, &headers);
      (st.ok() ? pushes_ : failures_)->Inc();
      j->push_done(std::move(st), std::move(headers));
    } else {
      absl::Status st = slots_[0].data == nullptr ? AllocateSlots() : absl::OkStatus();
      if (st.ok()) st = RunFetch(j->fetch_job);
      (st.ok() ? fetches_ : failures_)->Inc();
      j->fetch_done(std::move(st));
    }
  }
}

absl::Status GpuBounce::DeviceStream(int device, void** stream, void** events) {
  for (Streams& s : streams_) {
    if (s.device == device) {
      *stream = s.stream;
      events[0] = s.events[0];
      events[1] = s.events[1];
      return absl::OkStatus();
    }
  }
  Streams s;
  s.device = device;
  GRANARY_ASSIGN_OR_RETURN(s.stream, backend_->CreateStream(device));
  for (void*& e : s.events) {
    absl::StatusOr<void*> ev = backend_->CreateEvent(device);
    if (!ev.ok()) {
      for (void* made : s.events) {
        if (made != nullptr) backend_->DestroyEvent(made);
      }
      backend_->DestroyStream(s.stream);
      return ev.status();
    }
    e = *ev;
  }
  streams_.push_back(s);
  *stream = s.stream;
  events[0] = s.events[0];
  events[1] = s.events[1];
  return absl::OkStatus();
}

absl::Status GpuBounce::Remote(std::vector<transport::RmaOp> ops,
                               std::chrono::steady_clock::time_point deadline) {
  if (ops.empty()) return absl::OkStatus();
  auto p = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> f = p->get_future();
  rma_->Execute(std::move(ops), [p](absl::Status st) { p->set_value(std::move(st)); });
  // The watchdog closes the endpoint at the deadline, which completes the ops (with an error);
  // a stop gives up at once. Slots UCX may still write are abandoned, never reused.
  for (;;) {
    if (f.wait_for(std::chrono::milliseconds(20)) == std::future_status::ready) return f.get();
    bool stopping;
    {
      granary::common::MutexLock lock(&mu_);
      stopping = stopping_;
    }
    if (stopping || std::chrono::steady_clock::now() > deadline + std::chrono::seconds(1)) {
      GRANARY_LOG_WARN << "abandoning the GPU bounce slots: a transfer with " << slot_bytes_
                       << "-byte slots did not complete"
                       << (stopping ? " before the node stopped" : "");
      for (Slot& s : slots_) {
        (void)s.region.release();  // leaked with their memory: UCX may still touch them
        s.data = nullptr;
      }
      return stopping ? absl::CancelledError("the node is stopping")
                      : absl::DeadlineExceededError("a staged GPU transfer did not complete");
    }
  }
}

namespace {

absl::Status DeviceError(const char* what, const absl::Status& st) {
  return absl::InternalError(absl::StrCat("the node's ", what, " copy failed: ", st.message()));
}

}  // namespace

absl::Status GpuBounce::RunPush(const PushJob& job, std::string* headers) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::max<int64_t>(1, job.timeout_ms));
  std::vector<uint64_t> lengths;
  lengths.reserve(job.parts.size());
  for (const Part& p : job.parts) lengths.push_back(p.length);
  const std::vector<std::vector<common::SlotPart>> chunks =
      common::PackIntoSlots(lengths, slot_bytes_);
  // Devices touched by the chunk in each slot, whose events must be waited for.
  std::vector<int> used[2];
  auto enqueue = [&](size_t k) -> absl::Status {
    unsigned char* slot = slots_[k % 2].data;
    std::map<int, std::vector<device::CopyRegion>> by_device;
    for (const common::SlotPart& sp : chunks[k]) {
      const Part& p = job.parts[sp.item];
      if (p.device < 0) {
        std::memcpy(slot + sp.slot_offset, reinterpret_cast<const void*>(p.node_addr + sp.offset),
                    sp.length);
      } else {
        by_device[p.device].push_back({reinterpret_cast<const void*>(p.node_addr + sp.offset),
                                       slot + sp.slot_offset, sp.length});
      }
    }
    used[k % 2].clear();
    for (auto& [device, regions] : by_device) {
      void* stream = nullptr;
      void* events[2] = {nullptr, nullptr};
      GRANARY_RETURN_IF_ERROR(DeviceStream(device, &stream, events));
      absl::Status s =
          backend_->BatchCopyAsync(stream, regions.data(), static_cast<int>(regions.size()));
      if (s.ok()) s = backend_->RecordEvent(events[k % 2], stream);
      if (!s.ok()) return DeviceError("device-to-host", s);
      used[k % 2].push_back(device);
    }
    return absl::OkStatus();
  };
  auto wait = [&](size_t k) -> absl::Status {
    for (int device : used[k % 2]) {
      void* stream = nullptr;
      void* events[2] = {nullptr, nullptr};
      GRANARY_RETURN_IF_ERROR(DeviceStream(device, &stream, events));
      if (absl::Status s = backend_->WaitEvent(events[k % 2]); !s.ok()) {
        return DeviceError("device-to-host", s);
      }
    }
    return absl::OkStatus();
  };
  auto rma_of = [&](size_t k) {
    std::vector<transport::RmaOp> ops;
    const Slot& slot = slots_[k % 2];
    for (const common::SlotPart& sp : chunks[k]) {
      transport::RmaOp op;
      op.is_put = true;
      op.local = slot.data + sp.slot_offset;
      op.length = sp.length;
      op.memh = slot.region->memh();
      op.remote_addr = job.parts[sp.item].peer_addr + sp.offset;
      op.segment = job.peer;
      ops.push_back(std::move(op));
    }
    return ops;
  };
  absl::Status st = chunks.empty() ? absl::OkStatus() : enqueue(0);
  for (size_t k = 0; st.ok() && k < chunks.size(); ++k) {
    // Slot (k+1) % 2 held chunk k-1, whose write has completed.
    if (k + 1 < chunks.size()) st = enqueue(k + 1);
    if (st.ok()) st = wait(k);
    if (st.ok()) st = Remote(rma_of(k), deadline);
  }
  if (!st.ok()) {
    // Nothing may still copy into a slot that the next job fills.
    for (size_t k = 0; k < 2; ++k) (void)wait(k);
    return st;
  }
  // The headers, after every value has been written.
  headers->assign(job.headers.size() * proto::kAllocHeaderSize, '\0');
  for (size_t i = 0; i < job.headers.size(); ++i) {
    const Header& h = job.headers[i];
    char* out = headers->data() + i * proto::kAllocHeaderSize;
    if (h.device < 0) {
      std::memcpy(out, reinterpret_cast<const void*>(h.addr), proto::kAllocHeaderSize);
      continue;
    }
    absl::Status s = backend_->Copy(h.device, out, reinterpret_cast<const void*>(h.addr),
                                    proto::kAllocHeaderSize, device::CopyKind::kDefault);
    if (!s.ok()) return DeviceError("device-to-host header", s);
  }
  for (const Part& p : job.parts) bytes_->Inc(p.length);
  return absl::OkStatus();
}

absl::Status GpuBounce::RunFetch(const FetchJob& job) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::max<int64_t>(1, job.timeout_ms));
  const Part& p = job.part;
  // Pieces of at most one slot, the first kAllocHeaderSize bytes (a header) last.
  struct Piece {
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  std::vector<Piece> pieces;
  const uint64_t head = p.length > proto::kAllocHeaderSize ? proto::kAllocHeaderSize : 0;
  for (uint64_t off = head; off < p.length; off += slot_bytes_) {
    pieces.push_back({off, std::min<uint64_t>(slot_bytes_, p.length - off)});
  }
  if (head > 0) pieces.push_back({0, head});
  void* stream = nullptr;
  void* events[2] = {nullptr, nullptr};
  GRANARY_RETURN_IF_ERROR(DeviceStream(p.device, &stream, events));
  absl::Status st;
  bool recorded[2] = {false, false};
  for (size_t k = 0; st.ok() && k < pieces.size(); ++k) {
    const Slot& slot = slots_[k % 2];
    // The slot's previous host-to-device copy (piece k-2) must be done before it is refilled.
    if (recorded[k % 2]) {
      if (absl::Status s = backend_->WaitEvent(events[k % 2]); !s.ok()) {
        st = DeviceError("host-to-device", s);
        break;
      }
    }
    transport::RmaOp op;
    op.is_put = false;
    op.local = slot.data;
    op.length = pieces[k].length;
    op.memh = slot.region->memh();
    op.remote_addr = p.peer_addr + pieces[k].offset;
    op.segment = job.peer;
    std::vector<transport::RmaOp> ops;
    ops.push_back(std::move(op));
    st = Remote(std::move(ops), deadline);
    if (!st.ok()) break;
    device::CopyRegion r{slot.data, reinterpret_cast<void*>(p.node_addr + pieces[k].offset),
                         pieces[k].length};
    absl::Status s = backend_->BatchCopyAsync(stream, &r, 1);
    if (s.ok()) s = backend_->RecordEvent(events[k % 2], stream);
    if (!s.ok()) st = DeviceError("host-to-device", s);
    recorded[k % 2] = true;
  }
  // Answered only once every copy into the segment has completed.
  absl::Status synced = backend_->SynchronizeStream(stream);
  if (st.ok() && !synced.ok()) st = DeviceError("host-to-device", synced);
  if (st.ok()) bytes_->Inc(p.length);
  return st;
}

}  // namespace granary::node
