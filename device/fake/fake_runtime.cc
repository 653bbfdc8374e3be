// The fake backend's runtime (fake_runtime.h): the registry of fake memory, the synchronous
// copies, the knobs, and the translation to the alias views that the stream work and the
// kernels run on. Streams and events are in fake_streams.cc, IPC in fake_ipc.cc.

#include "device/fake/fake_runtime.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "device/launch_status.h"

namespace granary::device::internal {
namespace {

thread_local absl::Status t_last_error;

// cudaGetLastError: reads and clears the thread's slot.
absl::Status TakeLastError() { return std::exchange(t_last_error, absl::OkStatus()); }

}  // namespace

std::string Addr(const void* p) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
}

absl::Status PeekFakeLastError() { return t_last_error; }

void PassThroughFakeLastError(absl::Status status) {
  t_last_error = std::move(status);
  (void)TakeLastError();
}

absl::Status LaunchFake(absl::FunctionRef<absl::Status()> launch) {
  return LaunchStatus(&TakeLastError, [&] {
    if (absl::Status s = launch(); !s.ok()) t_last_error = std::move(s);
  });
}

FakeRuntime::FakeRuntime(const FakeOptions& options)
    : options_(options), op_delay_(options.op_delay), strict_pinned_(options.strict_pinned) {}

FakeRuntime::~FakeRuntime() {
  // Streams first: their workers may still touch the mappings.
  std::map<void*, std::unique_ptr<FakeStream>> streams;
  std::map<uintptr_t, Region> regions;
  {
    common::MutexLock lock(&mu_);
    streams.swap(streams_);
    regions.swap(regions_);
  }
  streams.clear();
  for (auto& [start, region] : regions) Release(start, region);
}

absl::StatusOr<void*> FakeRuntime::Alloc(int device, size_t bytes) {
  return AllocRegion("Alloc", device, bytes, MemoryKind::kDevice);
}

absl::StatusOr<void*> FakeRuntime::AllocManaged(int device, size_t bytes) {
  return AllocRegion("AllocManaged", device, bytes, MemoryKind::kManaged);
}

void FakeRuntime::Free(int, void* p) {
  if (p == nullptr) return;
  Region region;
  {
    common::MutexLock lock(&mu_);
    auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
    if (it == regions_.end() || it->second.ipc_opened ||
        (it->second.kind != MemoryKind::kDevice && it->second.kind != MemoryKind::kManaged)) {
      return;  // as cudaFree of a foreign pointer: an error nobody sees
    }
    region = std::move(it->second);
    regions_.erase(it);
  }
  Release(0, region);
}

absl::StatusOr<void*> FakeRuntime::HostAllocPinned(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("HostAllocPinned: bytes must be > 0, got 0");
  (void)CheckDevice("HostAllocPinned", 0);  // the current device of a thread that chose none
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("HostAllocPinned(", bytes, "): ", std::strerror(errno)));
  }
  Region region;
  region.kind = MemoryKind::kPinnedHost;
  region.bytes = bytes;
  region.owned_host = true;
  common::MutexLock lock(&mu_);
  InsertLocked(reinterpret_cast<uintptr_t>(p), std::move(region));
  return p;
}

void FakeRuntime::HostFreePinned(void* p) {
  if (p == nullptr) return;
  common::MutexLock lock(&mu_);
  auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
  if (it == regions_.end() || !it->second.owned_host) return;
  munmap(p, it->second.bytes);
  regions_.erase(it);
}

absl::Status FakeRuntime::HostRegister(void* p, size_t n) {
  if (p == nullptr || n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostRegister: needs a non-null pointer and n > 0, got ", Addr(p), " n=", n));
  }
  (void)CheckDevice("HostRegister", 0);  // as HostAllocPinned
  absl::Duration delay;
  {
    common::MutexLock lock(&mu_);
    const auto start = reinterpret_cast<uintptr_t>(p);
    auto it = regions_.lower_bound(start + n);
    if (it != regions_.begin()) {
      --it;
      if (it->first + it->second.bytes > start) {
        return absl::InvalidArgumentError(absl::StrCat(
            "HostRegister: [", Addr(p), ", +", n, ") overlaps ", MemoryKindName(it->second.kind),
            " memory at ", Addr(reinterpret_cast<void*>(it->first)),
            it->second.kind == MemoryKind::kPinnedHost ? " (already registered)" : ""));
      }
    }
    Region region;
    region.kind = MemoryKind::kPinnedHost;
    region.bytes = n;
    InsertLocked(start, std::move(region));
    delay = host_register_delay_;
  }
  absl::SleepFor(delay);
  return absl::OkStatus();
}

absl::Status FakeRuntime::HostUnregister(void* p) {
  common::MutexLock lock(&mu_);
  auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
  if (it == regions_.end() || it->second.kind != MemoryKind::kPinnedHost || it->second.owned_host) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostUnregister: ", Addr(p), " is not the start of a HostRegister range"));
  }
  regions_.erase(it);
  return absl::OkStatus();
}

// Cost: for an address outside the span of every range the fake ever knew (the usual host
// buffer of a process with no fake memory), two atomic loads and no lock; otherwise a lock and
// a map lookup.
PointerInfo FakeRuntime::Classify(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  if (addr < span_begin_.load(std::memory_order_acquire) ||
      addr >= span_end_.load(std::memory_order_acquire)) {
    return {};
  }
  common::MutexLock lock(&mu_);
  auto it = FindLocked(p);
  if (it == regions_.end()) return {};
  return {it->second.kind, it->second.device};
}

absl::Status FakeRuntime::Copy(int device, void* dst, const void* src, size_t n, CopyKind kind) {
  const char* op = kind == CopyKind::kHostToDevice   ? "CopyHostToDevice"
                   : kind == CopyKind::kDeviceToHost ? "CopyDeviceToHost"
                                                     : "Copy";
  if (absl::Status s = CheckDevice(op, device); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  synchronous_copies_.fetch_add(1, std::memory_order_relaxed);
  absl::StatusOr<unsigned char*> to = Translate(op, "dst", dst, n, /*strict=*/false);
  if (!to.ok()) return to.status();
  absl::StatusOr<unsigned char*> from = Translate(op, "src", src, n, /*strict=*/false);
  if (!from.ok()) return from.status();
  if (kind != CopyKind::kDefault) {
    const bool to_device = kind == CopyKind::kHostToDevice;
    if (absl::Status s = CheckOnDevice(op, to_device ? "dst" : "src", to_device ? dst : src);
        !s.ok()) {
      return s;
    }
  }
  return Execute([&] {
    std::memcpy(*to, *from, n);
    return absl::OkStatus();
  });
}

absl::Status FakeRuntime::Memset(int device, void* p, int value, size_t n) {
  if (absl::Status s = CheckDevice("Memset", device); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  absl::StatusOr<unsigned char*> to = Translate("Memset", "p", p, n, /*strict=*/false);
  if (!to.ok()) return to.status();
  if (absl::Status s = CheckOnDevice("Memset", "p", p); !s.ok()) return s;
  return Execute([&] {
    std::memset(*to, value, n);
    return absl::OkStatus();
  });
}

void FakeRuntime::FailNthAllocation(int n) {
  common::MutexLock lock(&mu_);
  alloc_countdown_ = n;
}

void FakeRuntime::InjectStickyCopyError() {
  common::MutexLock lock(&mu_);
  inject_sticky_ = true;
}

void FakeRuntime::SetStrictPinned(bool strict) {
  common::MutexLock lock(&mu_);
  strict_pinned_ = strict;
}

void FakeRuntime::SetHostRegisterDelay(absl::Duration delay) {
  common::MutexLock lock(&mu_);
  host_register_delay_ = delay;
}

int FakeRuntime::ContextsCreated(int device) {
  common::MutexLock lock(&mu_);
  return contexts_.contains(device) ? 1 : 0;
}

absl::Status FakeRuntime::CheckRange(const char* op, int device) const {
  if (device >= 0 && device < options_.device_count) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": fake CUDA device ", device, " is out of range [0, ", options_.device_count, ")"));
}

// CheckRange for a call that needs a context on `device` (ContextsCreated), which it then has.
absl::Status FakeRuntime::CheckDevice(const char* op, int device) {
  if (absl::Status s = CheckRange(op, device); !s.ok()) return s;
  common::MutexLock lock(&mu_);
  contexts_.insert(device);
  return absl::OkStatus();
}

absl::Status FakeRuntime::CheckOnDevice(const char* op, const char* name, const void* p) {
  const PointerInfo info = Classify(p);
  if (info.kind == MemoryKind::kDevice || info.kind == MemoryKind::kManaged) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " ", Addr(p), " is ",
                                                 MemoryKindName(info.kind),
                                                 " memory, not device memory"));
}

absl::StatusOr<void*> FakeRuntime::AllocRegion(const char* op, int device, size_t bytes,
                                               MemoryKind kind) {
  if (absl::Status s = CheckDevice(op, device); !s.ok()) return s;
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceAlloc(device=", device, "): bytes must be > 0, got 0"));
  }
  {
    common::MutexLock lock(&mu_);
    if (alloc_countdown_ > 0 && --alloc_countdown_ == 0) {
      return absl::ResourceExhaustedError(absl::StrCat(op, "(device=", device, ", bytes=", bytes,
                                                       "): out of fake device memory (injected)"));
    }
  }
  absl::StatusOr<FakeMapping> map =
      internal::MapNewFake(bytes, /*device_view=*/kind == MemoryKind::kDevice);
  if (!map.ok()) return map.status();
  Region region;
  region.kind = kind;
  region.device = device;
  region.bytes = bytes;
  region.map = *map;
  void* p = map->view;
  common::MutexLock lock(&mu_);
  InsertLocked(reinterpret_cast<uintptr_t>(p), std::move(region));
  return p;
}

void FakeRuntime::Release(uintptr_t start, Region& region) {
  if (region.owned_host) {
    munmap(reinterpret_cast<void*>(start), region.bytes);
    return;
  }
  internal::UnmapFake(region.map);
}

void FakeRuntime::InsertLocked(uintptr_t start, Region region) {
  const uintptr_t end = start + std::max<size_t>(region.bytes, region.map.mapped);
  regions_.emplace(start, std::move(region));
  if (start < span_begin_.load(std::memory_order_relaxed)) {
    span_begin_.store(start, std::memory_order_release);
  }
  if (end > span_end_.load(std::memory_order_relaxed)) {
    span_end_.store(end, std::memory_order_release);
  }
}

std::map<uintptr_t, FakeRuntime::Region>::const_iterator FakeRuntime::FindLocked(
    const void* p) const {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = regions_.upper_bound(addr);
  if (it == regions_.begin()) return regions_.end();
  --it;
  return addr < it->first + it->second.bytes ? it : regions_.end();
}

absl::StatusOr<unsigned char*> FakeRuntime::Translate(const char* op, const char* name,
                                                      const void* p, size_t n, bool strict) {
  if (p == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is null with n=", n));
  }
  const auto addr = reinterpret_cast<uintptr_t>(p);
  common::MutexLock lock(&mu_);
  auto it = FindLocked(p);
  const Region* r = it == regions_.end() ? nullptr : &it->second;
  const uintptr_t start = r == nullptr ? 0 : it->first;
  if (r != nullptr && r->kind == MemoryKind::kPinnedHost && addr + n > start + r->bytes) {
    r = nullptr;  // partly pinned host memory counts as pageable, as for the DMA engine
  }
  if (r != nullptr && addr + n > start + r->bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " [", Addr(p), ", +", n, ") runs past the end of the ",
                     MemoryKindName(r->kind), " range at ", Addr(reinterpret_cast<void*>(start)),
                     " of ", r->bytes, " bytes"));
  }
  if (r != nullptr && (r->kind == MemoryKind::kDevice || r->kind == MemoryKind::kManaged)) {
    return r->map.alias + (addr - start);
  }
  if (r == nullptr && strict && strict_pinned_) {
    return absl::FailedPreconditionError(
        absl::StrCat(op, ": ", name, " ", Addr(p), " (", n,
                     " bytes) is pageable host memory; strict pinned mode needs HostAllocPinned or "
                     "HostRegister memory"));
  }
  return static_cast<unsigned char*>(const_cast<void*>(p));
}

bool FakeRuntime::Strict() {
  common::MutexLock lock(&mu_);
  return strict_pinned_;
}

absl::Status FakeRuntime::Sticky() {
  common::MutexLock lock(&mu_);
  return sticky_;
}

absl::Status FakeRuntime::Execute(absl::FunctionRef<absl::Status()> copy) {
  {
    common::MutexLock lock(&mu_);
    if (!sticky_.ok()) return sticky_;
    if (inject_sticky_) {
      inject_sticky_ = false;
      sticky_ = absl::InternalError(
          "fake device: an illegal memory access was encountered (injected sticky copy error); "
          "every later copy fails");
      return sticky_;
    }
  }
  common::MutexLock engine(&engine_mu_);
  return copy();
}

}  // namespace granary::device::internal
