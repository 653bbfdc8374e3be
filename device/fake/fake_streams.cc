// The fake backend's streams and events (fake_runtime.h; fake_stream.h has the worker threads):
// handles, submission of work, and the copies queued on a stream.

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/fake/fake_runtime.h"
#include "device/kv_layout.h"
#include "device/kv_regions.h"

namespace granary::device::internal {
namespace {

absl::Status NotReadyError() {
  return absl::UnavailableError(
      "fake device: cudaErrorNotReady: device not ready (an event poll found its work unfinished)");
}

}  // namespace

absl::StatusOr<void*> FakeRuntime::CreateStream(int device) {
  if (absl::Status s = CheckDevice("CreateStream", device); !s.ok()) return s;
  return AddStream(std::make_unique<FakeStream>(device));
}

absl::StatusOr<void*> FakeRuntime::CreateEngineStream(int device, absl::Duration hold) {
  if (absl::Status s = CheckDevice("CreateEngineStream", device); !s.ok()) return s;
  if (hold < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateEngineStream: hold must be >= 0, got ", absl::FormatDuration(hold)));
  }
  return AddStream(std::make_unique<FakeStream>(device, std::make_shared<FakeHold>(hold)));
}

void* FakeRuntime::AddStream(std::unique_ptr<FakeStream> stream) {
  void* handle = stream.get();
  common::MutexLock lock(&mu_);
  streams_.emplace(handle, std::move(stream));
  return handle;
}

void FakeRuntime::DestroyStream(void* stream) {
  std::unique_ptr<FakeStream> owned;
  {
    common::MutexLock lock(&mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;
    owned = std::move(it->second);
    streams_.erase(it);
  }
  // Outside the lock: the destructor waits for the queue, whose operations take mu_.
  owned.reset();
}

absl::Status FakeRuntime::SynchronizeStream(void* stream) {
  absl::StatusOr<FakeStream*> s = FindStream("SynchronizeStream", stream);
  if (!s.ok()) return s.status();
  absl::Status status = *s == nullptr ? absl::OkStatus() : (*s)->Synchronize();
  if (absl::Status sticky = Sticky(); !sticky.ok()) return sticky;
  return status;
}

absl::Status FakeRuntime::BatchCopyAsync(void* stream, const CopyRegion* regions, int n) {
  return CopyRegions("BatchCopyAsync", stream, regions, n);
}

absl::Status FakeRuntime::LaunchHostFunc(void* stream, std::function<void()> fn) {
  if (!fn) return absl::InvalidArgumentError("LaunchHostFunc: fn is empty");
  return Submit("LaunchHostFunc", stream, [fn = std::move(fn)] {
    fn();
    return absl::OkStatus();
  });
}

absl::StatusOr<void*> FakeRuntime::CreateEvent(int device) {
  if (absl::Status s = CheckDevice("CreateEvent", device); !s.ok()) return s;
  auto event = std::make_shared<FakeEvent>();
  void* handle = event.get();
  common::MutexLock lock(&mu_);
  events_.emplace(handle, std::move(event));
  return handle;
}

void FakeRuntime::DestroyEvent(void* event) {
  common::MutexLock lock(&mu_);
  events_.erase(event);
}

absl::Status FakeRuntime::RecordEvent(void* event, void* stream) {
  absl::StatusOr<std::shared_ptr<FakeEvent>> e = FindEvent("RecordEvent", event);
  if (!e.ok()) return e.status();
  absl::StatusOr<FakeStream*> s = FindStream("RecordEvent", stream);
  if (!s.ok()) return s.status();
  const uint64_t number = (*e)->BeginRecord(*s == nullptr ? nullptr : (*s)->hold());
  return Submit("RecordEvent", stream, [this, e = *e, number] {
    e->MarkDone(number, Sticky());
    return absl::OkStatus();
  });
}

absl::StatusOr<bool> FakeRuntime::EventDone(void* event) {
  absl::StatusOr<std::shared_ptr<FakeEvent>> e = FindEvent("EventDone", event);
  if (!e.ok()) return e.status();
  absl::StatusOr<bool> done = (*e)->Query();
  // cudaEventQuery's cudaErrorNotReady lands in the thread's last-error slot, and the cuda
  // backend's EventDone takes it out again (cuda_backend.cc).
  if (done.ok() && !*done) {
    PassThroughFakeLastError(NotReadyError());
  }
  return done;
}

absl::Status FakeRuntime::WaitEvent(void* event) {
  absl::StatusOr<std::shared_ptr<FakeEvent>> e = FindEvent("WaitEvent", event);
  if (!e.ok()) return e.status();
  (*e)->ReleaseHeld();
  return (*e)->WaitFor((*e)->LastRecord());
}

absl::Status FakeRuntime::StreamWaitEvent(void* stream, void* event) {
  absl::StatusOr<std::shared_ptr<FakeEvent>> e = FindEvent("StreamWaitEvent", event);
  if (!e.ok()) return e.status();
  (*e)->ReleaseHeld();
  const uint64_t number = (*e)->LastRecord();
  return Submit("StreamWaitEvent", stream, [e = *e, number] { return e->WaitFor(number); });
}

void FakeRuntime::SetOpDelay(absl::Duration delay) {
  common::MutexLock lock(&mu_);
  op_delay_ = delay;
}

absl::Status FakeRuntime::CopyRegions(const char* op, void* stream, const CopyRegion* regions,
                                      int n) {
  if (absl::Status s = ValidateRegions(regions, n); !s.ok()) return s;
  const bool strict = Strict();
  std::vector<CopyRegion> aliased;
  aliased.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (regions[i].bytes == 0) continue;
    const std::string where = absl::StrCat("regions[", i, "]");
    absl::StatusOr<unsigned char*> dst =
        Translate(op, (where + ".dst").c_str(), regions[i].dst, regions[i].bytes, strict);
    if (!dst.ok()) return dst.status();
    absl::StatusOr<unsigned char*> src =
        Translate(op, (where + ".src").c_str(), regions[i].src, regions[i].bytes, strict);
    if (!src.ok()) return src.status();
    aliased.push_back({*src, *dst, regions[i].bytes});
  }
  if (aliased.empty()) return absl::OkStatus();
  return Submit(op, stream, [this, aliased = std::move(aliased)] {
    return Execute([&] { return BatchCopyCpu(aliased.data(), static_cast<int>(aliased.size())); });
  });
}

absl::StatusOr<FakeStream*> FakeRuntime::FindStream(const char* op, void* stream) {
  if (stream == nullptr) return nullptr;
  common::MutexLock lock(&mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": stream ", Addr(stream), " is not a live stream of the fake backend"));
  }
  return it->second.get();
}

absl::StatusOr<std::shared_ptr<FakeEvent>> FakeRuntime::FindEvent(const char* op, void* event) {
  common::MutexLock lock(&mu_);
  auto it = events_.find(event);
  if (it == events_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": event ", Addr(event), " is not a live event of the fake backend"));
  }
  return it->second;
}

absl::Status FakeRuntime::Submit(const char* name, void* stream, FakeStream::Op op) {
  if (absl::Status sticky = Sticky(); !sticky.ok()) return sticky;
  absl::StatusOr<FakeStream*> s = FindStream(name, stream);
  if (!s.ok()) return s.status();
  if (*s == nullptr) {
    default_stream_ops_.fetch_add(1, std::memory_order_relaxed);
    return op();
  }
  absl::Duration delay;
  {
    common::MutexLock lock(&mu_);
    delay = op_delay_;
  }
  (*s)->Enqueue(delay, std::move(op));
  return absl::OkStatus();
}

}  // namespace granary::device::internal
