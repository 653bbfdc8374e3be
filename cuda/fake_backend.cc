// The fake device backend (fake_backend.h): the registry of fake memory, the copy engine on the
// alias views, streams, events, IPC and the injected faults.

#include "cuda/fake_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "cuda/fake_memory.h"
#include "cuda/fake_stream.h"
#include "cuda/kv_regions.h"
#include "cuda/launch_status.h"

namespace granary::cuda {
namespace {

using internal::FakeEvent;
using internal::FakeMapping;
using internal::FakeStream;

std::string Addr(const void* p) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
}

// CUDA's per-thread last error (FakeBackend::PeekAtLastError), one per thread for every fake of
// the process, as CUDA keeps one per thread for the process.
thread_local absl::Status t_last_error;

absl::Status NotReadyError() {
  return absl::UnavailableError(
      "fake device: cudaErrorNotReady: device not ready (an event poll found its work unfinished)");
}

// cudaGetLastError: reads and clears the thread's slot.
absl::Status TakeLastError() { return std::exchange(t_last_error, absl::OkStatus()); }

// A kernel launch of the fake, as the cuda backend makes one (kernels.cu): the launch's error
// lands in the thread's last-error slot, and the launch reports what the slot holds afterwards,
// through the same LaunchStatus.
absl::Status Launch(absl::FunctionRef<absl::Status()> launch) {
  return internal::LaunchStatus(&TakeLastError, [&] {
    if (absl::Status s = launch(); !s.ok()) t_last_error = std::move(s);
  });
}

// One range the fake knows: device or managed memory (`map`), or pinned host memory.
struct Region {
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;
  FakeMapping map;   // kDevice, kManaged
  size_t bytes = 0;  // usable bytes from the start address
  // kDevice mapped by OpenIpc: the exporter's allocation (its pid, start time and memfd inode),
  // and the opens not yet closed by the offset of the pointer each returned. As CUDA does, an
  // open of a handle this process already has open returns the same pointer and counts it; the
  // mapping goes at the last close.
  bool ipc_opened = false;
  std::tuple<int64_t, uint64_t, uint64_t> ipc_source;
  std::map<uint64_t, int> ipc_opens;
  bool owned_host = false;  // kPinnedHost from HostAllocPinned (munmap on free), not registered
};

// How many bytes of each cache one gather or scatter may touch.
size_t CacheBytes(const PagedKvLayout& layout) {
  return static_cast<size_t>(layout.num_blocks - 1) * layout.BlockStride() + layout.BlockBytes();
}

class FakeBackendImpl final : public FakeBackend {
 public:
  explicit FakeBackendImpl(const FakeOptions& options)
      : options_(options), op_delay_(options.op_delay), strict_pinned_(options.strict_pinned) {}

  ~FakeBackendImpl() override {
    // Streams first: their workers may still touch the mappings.
    std::map<void*, std::unique_ptr<FakeStream>> streams;
    std::map<uintptr_t, Region> regions;
    {
      MutexLock lock(&mu_);
      streams.swap(streams_);
      regions.swap(regions_);
    }
    streams.clear();
    for (auto& [start, region] : regions) Release(start, region);
  }

  absl::string_view Name() const override { return "fake"; }
  int DeviceCount() override { return options_.device_count; }

  absl::StatusOr<void*> Alloc(int device, size_t bytes) override {
    return AllocRegion("Alloc", device, bytes, MemoryKind::kDevice);
  }
  absl::StatusOr<void*> AllocManaged(int device, size_t bytes) override {
    return AllocRegion("AllocManaged", device, bytes, MemoryKind::kManaged);
  }

  void Free(int, void* p) override {
    if (p == nullptr) return;
    Region region;
    {
      MutexLock lock(&mu_);
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

  absl::StatusOr<void*> HostAllocPinned(size_t bytes) override {
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
    MutexLock lock(&mu_);
    InsertLocked(reinterpret_cast<uintptr_t>(p), std::move(region));
    return p;
  }

  void HostFreePinned(void* p) override {
    if (p == nullptr) return;
    MutexLock lock(&mu_);
    auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
    if (it == regions_.end() || !it->second.owned_host) return;
    munmap(p, it->second.bytes);
    regions_.erase(it);
  }

  absl::Status HostRegister(void* p, size_t n) override {
    if (p == nullptr || n == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "HostRegister: needs a non-null pointer and n > 0, got ", Addr(p), " n=", n));
    }
    (void)CheckDevice("HostRegister", 0);  // as HostAllocPinned
    absl::Duration delay;
    {
      MutexLock lock(&mu_);
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

  absl::Status HostUnregister(void* p) override {
    MutexLock lock(&mu_);
    auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
    if (it == regions_.end() || it->second.kind != MemoryKind::kPinnedHost ||
        it->second.owned_host) {
      return absl::InvalidArgumentError(
          absl::StrCat("HostUnregister: ", Addr(p), " is not the start of a HostRegister range"));
    }
    regions_.erase(it);
    return absl::OkStatus();
  }

  // Cost: for an address outside the span of every range the fake ever knew (the usual host
  // buffer of a process with no fake memory), two atomic loads and no lock; otherwise a lock and
  // a map lookup.
  PointerInfo Classify(const void* p) override {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    if (addr < span_begin_.load(std::memory_order_acquire) ||
        addr >= span_end_.load(std::memory_order_acquire)) {
      return {};
    }
    MutexLock lock(&mu_);
    auto it = FindLocked(p);
    if (it == regions_.end()) return {};
    return {it->second.kind, it->second.device};
  }

  absl::Status Copy(int device, void* dst, const void* src, size_t n, CopyKind kind) override {
    const char* op = kind == CopyKind::kHostToDevice   ? "CopyHostToDevice"
                     : kind == CopyKind::kDeviceToHost ? "CopyDeviceToHost"
                                                       : "Copy";
    if (absl::Status s = CheckDevice(op, device); !s.ok()) return s;
    if (n == 0) return absl::OkStatus();
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

  absl::Status Memset(int device, void* p, int value, size_t n) override {
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

  absl::StatusOr<void*> CreateStream(int device) override {
    if (absl::Status s = CheckDevice("CreateStream", device); !s.ok()) return s;
    return AddStream(std::make_unique<FakeStream>(device));
  }

  absl::StatusOr<void*> CreateEngineStream(int device, absl::Duration hold) override {
    if (absl::Status s = CheckDevice("CreateEngineStream", device); !s.ok()) return s;
    if (hold < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CreateEngineStream: hold must be >= 0, got ", absl::FormatDuration(hold)));
    }
    return AddStream(
        std::make_unique<FakeStream>(device, std::make_shared<internal::FakeHold>(hold)));
  }

  void* AddStream(std::unique_ptr<FakeStream> stream) {
    void* handle = stream.get();
    MutexLock lock(&mu_);
    streams_.emplace(handle, std::move(stream));
    return handle;
  }

  void DestroyStream(void* stream) override {
    std::unique_ptr<FakeStream> owned;
    {
      MutexLock lock(&mu_);
      auto it = streams_.find(stream);
      if (it == streams_.end()) return;
      owned = std::move(it->second);
      streams_.erase(it);
    }
    // Outside the lock: the destructor waits for the queue, whose operations take mu_.
    owned.reset();
  }

  absl::Status SynchronizeStream(void* stream) override {
    absl::StatusOr<FakeStream*> s = FindStream("SynchronizeStream", stream);
    if (!s.ok()) return s.status();
    absl::Status status = *s == nullptr ? absl::OkStatus() : (*s)->Synchronize();
    if (absl::Status sticky = Sticky(); !sticky.ok()) return sticky;
    return status;
  }

  absl::Status BatchCopyAsync(void* stream, const CopyRegion* regions, int n) override {
    return CopyRegions("BatchCopyAsync", stream, regions, n);
  }

  absl::Status GatherBlocks(int device, const PagedKvLayout& layout, const void* k_cache,
                            const void* v_cache, const int32_t* block_ids, int n, void* out,
                            void* stream) override {
    const char* op = "GatherBlocksGpu";
    absl::StatusOr<BlockOpViews> views =
        PrepareBlockOp(op, device, layout, block_ids, n, /*scatter=*/false, out, k_cache, v_cache);
    if (!views.ok() || n == 0) return views.status();
    return Launch([&] {
      return Submit(
          op, stream,
          [this, layout, views = *views, ids = std::vector<int32_t>(block_ids, block_ids + n)] {
            return Execute([&] {
              return GatherBlocksCpu(layout, views.k, views.v, ids.data(),
                                     static_cast<int>(ids.size()), views.buffer);
            });
          });
    });
  }

  absl::Status ScatterBlocks(int device, const PagedKvLayout& layout, const void* in,
                             const int32_t* block_ids, int n, void* k_cache, void* v_cache,
                             void* stream) override {
    const char* op = "ScatterBlocksGpu";
    absl::StatusOr<BlockOpViews> views =
        PrepareBlockOp(op, device, layout, block_ids, n, /*scatter=*/true, in, k_cache, v_cache);
    if (!views.ok() || n == 0) return views.status();
    return Launch([&] {
      return Submit(
          op, stream,
          [this, layout, views = *views, ids = std::vector<int32_t>(block_ids, block_ids + n)] {
            return Execute([&] {
              return ScatterBlocksCpu(layout, views.buffer, ids.data(),
                                      static_cast<int>(ids.size()), views.k, views.v);
            });
          });
    });
  }

  absl::Status BatchCopy(int device, const CopyRegion* regions, int n, void* stream) override {
    if (absl::Status s = CheckDevice("BatchCopyGpu", device); !s.ok()) return s;
    return Launch([&] { return CopyRegions("BatchCopyGpu", stream, regions, n); });
  }

  // The CPU reference on the alias views; `out` is written by the stream worker (or before
  // return for the default stream). Region data outside fake device memory is host memory, read
  // in place (refused in strict pinned mode unless pinned), as for the other kernels.
  absl::Status BatchChecksum(int device, const ChecksumRegion* regions, int n, uint64_t* out,
                             void* stream) override {
    const char* op = "BatchChecksum";
    if (absl::Status s = CheckDevice(op, device); !s.ok()) return s;
    if (absl::Status s = ValidateChecksumRegions(regions, n, out); !s.ok()) return s;
    if (n == 0) return absl::OkStatus();
    if (const PointerInfo info = Classify(out); info.kind == MemoryKind::kDevice) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": out ", Addr(out), " is device memory; it must be host memory"));
    }
    const bool strict = Strict();
    std::vector<ChecksumRegion> aliased(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      if (regions[i].bytes == 0) continue;
      const std::string where = absl::StrCat("regions[", i, "].data");
      absl::StatusOr<unsigned char*> data =
          Translate(op, where.c_str(), regions[i].data, regions[i].bytes, strict);
      if (!data.ok()) return data.status();
      aliased[i] = {*data, regions[i].bytes};
    }
    return Launch([&] {
      return Submit(op, stream, [this, aliased = std::move(aliased), out] {
        return Execute([&] {
          return BatchChecksumCpu(aliased.data(), static_cast<int>(aliased.size()), out);
        });
      });
    });
  }

  absl::Status LaunchHostFunc(void* stream, std::function<void()> fn) override {
    if (!fn) return absl::InvalidArgumentError("LaunchHostFunc: fn is empty");
    return Submit("LaunchHostFunc", stream, [fn = std::move(fn)] {
      fn();
      return absl::OkStatus();
    });
  }

  absl::StatusOr<void*> CreateEvent(int device) override {
    if (absl::Status s = CheckDevice("CreateEvent", device); !s.ok()) return s;
    auto event = std::make_shared<FakeEvent>();
    void* handle = event.get();
    MutexLock lock(&mu_);
    events_.emplace(handle, std::move(event));
    return handle;
  }

  void DestroyEvent(void* event) override {
    MutexLock lock(&mu_);
    events_.erase(event);
  }

  absl::Status RecordEvent(void* event, void* stream) override {
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

  absl::StatusOr<bool> EventDone(void* event) override {
    absl::StatusOr<std::shared_ptr<FakeEvent>> e = FindEvent("EventDone", event);
    if (!e.ok()) return e.status();
    absl::StatusOr<bool> done = (*e)->Query();
    // cudaEventQuery's cudaErrorNotReady lands in the thread's last-error slot, and the cuda
    // backend's EventDone takes it out again (cuda_backend.cc).
    if (done.ok() && !*done) {
      t_last_error = NotReadyError();
      (void)TakeLastError();
    }
    return done;
  }

  absl::Status WaitEvent(void* event) override {
    absl::StatusOr<std::shared_ptr<FakeEvent>> e = FindEvent("WaitEvent", event);
    if (!e.ok()) return e.status();
    (*e)->ReleaseHeld();
    return (*e)->WaitFor((*e)->LastRecord());
  }

  absl::Status StreamWaitEvent(void* stream, void* event) override {
    absl::StatusOr<std::shared_ptr<FakeEvent>> e = FindEvent("StreamWaitEvent", event);
    if (!e.ok()) return e.status();
    (*e)->ReleaseHeld();
    const uint64_t number = (*e)->LastRecord();
    return Submit("StreamWaitEvent", stream, [e = *e, number] { return e->WaitFor(number); });
  }

  absl::StatusOr<std::string> ExportIpc(const void* p) override;
  absl::StatusOr<void*> OpenIpc(int device, absl::string_view blob) override;
  absl::Status CloseIpc(void* mapped) override;
  // The pointer at `offset` into this process's open mapping of `source` with its count raised;
  // null when there is none.
  void* ReopenLocked(const std::tuple<int64_t, uint64_t, uint64_t>& source, uint64_t offset)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<DeviceUuid> DeviceUuidOf(int device) override {
    if (absl::Status s = CheckRange("DeviceUuid", device); !s.ok()) return s;  // no context
    return Uuid(device);
  }

  // The swaps run on the alias with std::atomic_ref: the alias is a shared mapping, so they are
  // atomic against another process's fake copies (which are memcpy of whole 8-byte words at
  // aligned addresses on x86-64) as CUDA's atomics are against DMA writes.
  absl::Status CompareExchange64(int device, const CasOp64* ops, int n) override {
    constexpr const char* kOp = "CompareExchange64";
    if (absl::Status s = CheckDevice(kOp, device); !s.ok()) return s;
    if (n < 0 || (n > 0 && ops == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", n, " ops at ", Addr(ops)));
    }
    std::vector<uint64_t*> words(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const std::string name = absl::StrCat("ops[", i, "].p");
      if (reinterpret_cast<uintptr_t>(ops[i].p) % 8 != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(kOp, ": ", name, " ", Addr(ops[i].p), " is not 8-byte aligned"));
      }
      if (absl::Status s = CheckOnDevice(kOp, name.c_str(), ops[i].p); !s.ok()) return s;
      absl::StatusOr<unsigned char*> at = Translate(kOp, name.c_str(), ops[i].p, 8, false);
      if (!at.ok()) return at.status();
      words[i] = reinterpret_cast<uint64_t*>(*at);
    }
    return Launch([&] {
      return Execute([&] {
        for (int i = 0; i < n; ++i) {
          uint64_t expected = ops[i].expected;
          std::atomic_ref<uint64_t>(*words[i]).compare_exchange_strong(expected, ops[i].desired,
                                                                       std::memory_order_acq_rel);
        }
        return absl::OkStatus();
      });
    });
  }

  void FailNthAllocation(int n) override {
    MutexLock lock(&mu_);
    alloc_countdown_ = n;
  }
  void InjectStickyCopyError() override {
    MutexLock lock(&mu_);
    inject_sticky_ = true;
  }
  void FailNextIpcOpen() override {
    MutexLock lock(&mu_);
    fail_next_ipc_open_ = true;
  }
  void SetOpDelay(absl::Duration delay) override {
    MutexLock lock(&mu_);
    op_delay_ = delay;
  }
  void SetStrictPinned(bool strict) override {
    MutexLock lock(&mu_);
    strict_pinned_ = strict;
  }
  void SetHostRegisterDelay(absl::Duration delay) override {
    MutexLock lock(&mu_);
    host_register_delay_ = delay;
  }
  uint64_t DefaultStreamOps() override {
    return default_stream_ops_.load(std::memory_order_relaxed);
  }
  int ContextsCreated(int device) override {
    MutexLock lock(&mu_);
    return contexts_.contains(device) ? 1 : 0;
  }

 private:
  DeviceUuid Uuid(int device) const {
    DeviceUuid uuid = {
        options_.uuid_seed, 'g', 'r', 'a', 'n', 'a', 'r', 'y', '-', 'f', 'a', 'k', 'e', 0, 0, 0};
    uuid[15] = static_cast<uint8_t>(device);
    return uuid;
  }

  absl::Status CheckRange(const char* op, int device) const {
    if (device >= 0 && device < options_.device_count) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": fake CUDA device ", device, " is out of range [0, ", options_.device_count, ")"));
  }

  // CheckRange for a call that needs a context on `device` (ContextsCreated), which it then has.
  absl::Status CheckDevice(const char* op, int device) {
    if (absl::Status s = CheckRange(op, device); !s.ok()) return s;
    MutexLock lock(&mu_);
    contexts_.insert(device);
    return absl::OkStatus();
  }

  // INVALID_ARGUMENT unless p is device or managed memory.
  absl::Status CheckOnDevice(const char* op, const char* name, const void* p) {
    const PointerInfo info = Classify(p);
    if (info.kind == MemoryKind::kDevice || info.kind == MemoryKind::kManaged) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " ", Addr(p), " is ",
                                                   MemoryKindName(info.kind),
                                                   " memory, not device memory"));
  }

  absl::StatusOr<void*> AllocRegion(const char* op, int device, size_t bytes, MemoryKind kind) {
    if (absl::Status s = CheckDevice(op, device); !s.ok()) return s;
    if (bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceAlloc(device=", device, "): bytes must be > 0, got 0"));
    }
    {
      MutexLock lock(&mu_);
      if (alloc_countdown_ > 0 && --alloc_countdown_ == 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            op, "(device=", device, ", bytes=", bytes, "): out of fake device memory (injected)"));
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
    MutexLock lock(&mu_);
    InsertLocked(reinterpret_cast<uintptr_t>(p), std::move(region));
    return p;
  }

  // Gives a region's memory back; `start` is its key (used for pinned memory we mapped).
  static void Release(uintptr_t start, Region& region) {
    if (region.owned_host) {
      munmap(reinterpret_cast<void*>(start), region.bytes);
      return;
    }
    internal::UnmapFake(region.map);
  }

  // The region holding p, or regions_.end().
  // Adds a range and widens the span Classify checks first (never narrowed: a stale span only
  // costs a lookup).
  void InsertLocked(uintptr_t start, Region region) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uintptr_t end = start + std::max<size_t>(region.bytes, region.map.mapped);
    regions_.emplace(start, std::move(region));
    if (start < span_begin_.load(std::memory_order_relaxed)) {
      span_begin_.store(start, std::memory_order_release);
    }
    if (end > span_end_.load(std::memory_order_relaxed)) {
      span_end_.store(end, std::memory_order_release);
    }
  }

  std::map<uintptr_t, Region>::const_iterator FindLocked(const void* p) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    auto it = regions_.upper_bound(addr);
    if (it == regions_.begin()) return regions_.end();
    --it;
    return addr < it->first + it->second.bytes ? it : regions_.end();
  }

  // Where the copy engine touches [p, p + n): the alias for device and managed memory, p itself
  // for host memory (refused in strict mode unless pinned).
  absl::StatusOr<unsigned char*> Translate(const char* op, const char* name, const void* p,
                                           size_t n, bool strict) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is null with n=", n));
    }
    const auto addr = reinterpret_cast<uintptr_t>(p);
    MutexLock lock(&mu_);
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
      return absl::FailedPreconditionError(absl::StrCat(
          op, ": ", name, " ", Addr(p), " (", n,
          " bytes) is pageable host memory; strict pinned mode needs HostAllocPinned or "
          "HostRegister memory"));
    }
    return static_cast<unsigned char*>(const_cast<void*>(p));
  }

  // Where a gather or scatter touches memory: the gathered buffer and the two caches.
  struct BlockOpViews {
    unsigned char* buffer = nullptr;
    unsigned char* k = nullptr;
    unsigned char* v = nullptr;
  };

  // Validates a gather (scatter: rejecting duplicate ids) and finds its ranges on the alias
  // views; all null when n == 0.
  absl::StatusOr<BlockOpViews> PrepareBlockOp(const char* op, int device,
                                              const PagedKvLayout& layout, const int32_t* block_ids,
                                              int n, bool scatter, const void* buffer,
                                              const void* k_cache, const void* v_cache) {
    if (absl::Status s = CheckDevice(op, device); !s.ok()) return s;
    if (absl::Status s = ValidateBlockIds(layout, block_ids, n, /*reject_duplicates=*/scatter);
        !s.ok()) {
      return s;
    }
    BlockOpViews views;
    if (n == 0) return views;
    const bool strict = Strict();
    const std::pair<const char*, const void*> caches[] = {{"k_cache", k_cache},
                                                          {"v_cache", v_cache}};
    unsigned char** targets[] = {&views.k, &views.v};
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<unsigned char*> alias =
          Translate(op, caches[i].first, caches[i].second, CacheBytes(layout), strict);
      if (!alias.ok()) return alias.status();
      *targets[i] = *alias;
    }
    absl::StatusOr<unsigned char*> alias =
        Translate(op, scatter ? "in" : "out", buffer, layout.GatheredBytes(n), strict);
    if (!alias.ok()) return alias.status();
    views.buffer = *alias;
    return views;
  }

  bool Strict() {
    MutexLock lock(&mu_);
    return strict_pinned_;
  }

  absl::Status Sticky() {
    MutexLock lock(&mu_);
    return sticky_;
  }

  // Runs one copy on the alias views, unless the backend is broken or a fault is due.
  absl::Status Execute(absl::FunctionRef<absl::Status()> copy) {
    {
      MutexLock lock(&mu_);
      if (!sticky_.ok()) return sticky_;
      if (inject_sticky_) {
        inject_sticky_ = false;
        sticky_ = absl::InternalError(
            "fake device: an illegal memory access was encountered (injected sticky copy error); "
            "every later copy fails");
        return sticky_;
      }
    }
    return copy();
  }

  absl::Status CopyRegions(const char* op, void* stream, const CopyRegion* regions, int n) {
    if (absl::Status s = internal::ValidateRegions(regions, n); !s.ok()) return s;
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
      return Execute(
          [&] { return BatchCopyCpu(aliased.data(), static_cast<int>(aliased.size())); });
    });
  }

  absl::StatusOr<FakeStream*> FindStream(const char* op, void* stream) {
    if (stream == nullptr) return nullptr;
    MutexLock lock(&mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": stream ", Addr(stream), " is not a live stream of the fake backend"));
    }
    return it->second.get();
  }

  absl::StatusOr<std::shared_ptr<FakeEvent>> FindEvent(const char* op, void* event) {
    MutexLock lock(&mu_);
    auto it = events_.find(event);
    if (it == events_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": event ", Addr(event), " is not a live event of the fake backend"));
    }
    return it->second;
  }

  // Runs `op` now (stream == nullptr: the synchronous default stream) or queues it.
  absl::Status Submit(const char* name, void* stream, FakeStream::Op op) {
    if (absl::Status sticky = Sticky(); !sticky.ok()) return sticky;
    absl::StatusOr<FakeStream*> s = FindStream(name, stream);
    if (!s.ok()) return s.status();
    if (*s == nullptr) {
      default_stream_ops_.fetch_add(1, std::memory_order_relaxed);
      return op();
    }
    absl::Duration delay;
    {
      MutexLock lock(&mu_);
      delay = op_delay_;
    }
    (*s)->Enqueue(delay, std::move(op));
    return absl::OkStatus();
  }

  const FakeOptions options_;
  Mutex mu_;
  // Keyed by start address; ranges never overlap.
  std::map<uintptr_t, Region> regions_ ABSL_GUARDED_BY(mu_);
  // [span_begin_, span_end_) covers every range ever in regions_; written under mu_, read
  // without it by Classify.
  std::atomic<uintptr_t> span_begin_{UINTPTR_MAX};
  std::atomic<uintptr_t> span_end_{0};
  std::map<void*, std::unique_ptr<FakeStream>> streams_ ABSL_GUARDED_BY(mu_);
  std::map<void*, std::shared_ptr<FakeEvent>> events_ ABSL_GUARDED_BY(mu_);
  std::set<int> contexts_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> default_stream_ops_{0};
  absl::Duration host_register_delay_
      ABSL_GUARDED_BY(mu_);  // devices with a context (ContextsCreated)
  int alloc_countdown_ ABSL_GUARDED_BY(mu_) = 0;
  bool inject_sticky_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_next_ipc_open_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status sticky_ ABSL_GUARDED_BY(mu_);
  absl::Duration op_delay_ ABSL_GUARDED_BY(mu_);
  bool strict_pinned_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::string> FakeBackendImpl::ExportIpc(const void* p) {
  internal::FakeIpcHandle handle;
  {
    MutexLock lock(&mu_);
    auto it = FindLocked(p);
    const Region* r = it == regions_.end() ? nullptr : &it->second;
    if (r == nullptr || r->kind != MemoryKind::kDevice || r->ipc_opened) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ExportIpc: ", Addr(p), " is not fake device memory allocated in this process (it is ",
          r == nullptr ? "host" : (r->ipc_opened ? "an IPC mapping" : MemoryKindName(r->kind)),
          " memory)"));
    }
    handle.fd = r->map.fd;
    handle.device = r->device;
    handle.inode = r->map.inode;
    handle.offset = reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(r->map.view);
    handle.size = r->bytes;
  }
  handle.pid = getpid();
  absl::StatusOr<uint64_t> start = internal::ProcessStartTime(getpid());
  if (!start.ok()) return start.status();
  handle.start_time = *start;
  handle.uuid = Uuid(handle.device);
  return internal::EncodeFakeIpc(handle);
}

absl::StatusOr<void*> FakeBackendImpl::OpenIpc(int device, absl::string_view blob) {
  if (absl::Status s = CheckDevice("OpenIpc", device); !s.ok()) return s;
  {
    MutexLock lock(&mu_);
    if (std::exchange(fail_next_ipc_open_, false)) {
      return absl::InternalError("OpenIpc: the fake IPC open failed (injected)");
    }
  }
  absl::StatusOr<internal::FakeIpcHandle> handle = internal::DecodeFakeIpc(blob);
  if (!handle.ok()) return handle.status();
  if (handle->pid == getpid()) {
    return absl::InvalidArgumentError(
        "OpenIpc: the handle was exported by this process; a process maps its own memory "
        "directly (CUDA refuses this open too)");
  }
  if (handle->device < 0 || handle->device >= options_.device_count ||
      handle->uuid != Uuid(handle->device)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OpenIpc: the handle names fake device ", handle->device,
        " with a UUID this process does not have (another host, or another uuid_seed)"));
  }
  absl::StatusOr<int> fd = internal::OpenExportedFd(*handle);
  if (!fd.ok()) return fd.status();
  const std::tuple<int64_t, uint64_t, uint64_t> source{handle->pid, handle->start_time,
                                                       handle->inode};
  {
    MutexLock lock(&mu_);
    if (void* mapped = ReopenLocked(source, handle->offset)) {
      close(*fd);
      return mapped;
    }
  }
  absl::StatusOr<FakeMapping> map = internal::MapFakeFd(*fd, handle->size);
  if (!map.ok()) return map.status();
  MutexLock lock(&mu_);
  if (void* mapped = ReopenLocked(source, handle->offset)) {  // another thread mapped it first
    internal::UnmapFake(*map);
    return mapped;
  }
  Region region;
  region.kind = MemoryKind::kDevice;
  region.device = handle->device;
  region.bytes = handle->size;
  region.map = *map;
  region.ipc_opened = true;
  region.ipc_source = source;
  region.ipc_opens[handle->offset] = 1;
  void* mapped = static_cast<unsigned char*>(map->view) + handle->offset;
  InsertLocked(reinterpret_cast<uintptr_t>(map->view), std::move(region));
  return mapped;
}

void* FakeBackendImpl::ReopenLocked(const std::tuple<int64_t, uint64_t, uint64_t>& source,
                                    uint64_t offset) {
  for (auto& [start, region] : regions_) {
    if (!region.ipc_opened || region.ipc_source != source) continue;
    ++region.ipc_opens[offset];
    return reinterpret_cast<unsigned char*>(start) + offset;
  }
  return nullptr;
}

absl::Status FakeBackendImpl::CloseIpc(void* mapped) {
  Region region;
  {
    MutexLock lock(&mu_);
    const auto addr = reinterpret_cast<uintptr_t>(mapped);
    auto it = regions_.upper_bound(addr);
    if (it != regions_.begin()) --it;
    if (it == regions_.end() || !it->second.ipc_opened || addr < it->first ||
        !it->second.ipc_opens.contains(addr - it->first)) {
      return absl::InvalidArgumentError(
          absl::StrCat("CloseIpc: ", Addr(mapped), " is not a pointer OpenIpc returned"));
    }
    auto open = it->second.ipc_opens.find(addr - it->first);
    if (--open->second == 0) it->second.ipc_opens.erase(open);
    if (!it->second.ipc_opens.empty()) return absl::OkStatus();
    region = std::move(it->second);
    regions_.erase(it);
  }
  Release(0, region);
  return absl::OkStatus();
}

}  // namespace

absl::Status FakeBackend::PeekAtLastError() { return t_last_error; }

absl::StatusOr<std::unique_ptr<FakeBackend>> FakeBackend::Create(const FakeOptions& options) {
  if (options.device_count < 1 || options.device_count > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("FakeOptions.device_count must be in [1, 255], got ", options.device_count));
  }
  if (options.op_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("FakeOptions.op_delay must be >= 0, got ",
                                                   absl::FormatDuration(options.op_delay)));
  }
  return std::unique_ptr<FakeBackend>(std::make_unique<FakeBackendImpl>(options));
}

}  // namespace granary::cuda
