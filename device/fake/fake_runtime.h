#pragma once

// Private to the fake backend (fake_backend.h): its runtime, and what its kernels (fake_kernels.h)
// use of it: the translation of device pointers to the alias views, the submission of work to a
// stream, and the sticky error. Defined over fake_runtime.cc (memory and copies),
// fake_streams.cc (streams and events) and fake_ipc.cc (IPC and device UUIDs).

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "device/device_runtime.h"
#include "device/fake/fake_backend.h"
#include "device/fake/fake_memory.h"
#include "device/fake/fake_stream.h"

namespace granary::device::internal {

// "0x..." for a message.
std::string Addr(const void* p);

// CUDA's per-thread last error (FakeBackend::PeekAtLastError): one slot per thread for every fake
// of the process, as CUDA keeps one per thread for the process.
absl::Status PeekFakeLastError();
// Puts `status` in the calling thread's slot, then takes it out again (cudaEventQuery's
// cudaErrorNotReady, read and cleared by the cuda backend's EventDone).
void PassThroughFakeLastError(absl::Status status);
// A kernel launch of the fake, as the cuda backend makes one (kernels.cu): the launch's error
// lands in the thread's last-error slot, and the launch reports what the slot holds afterwards,
// through the same LaunchStatus.
[[nodiscard]] absl::Status LaunchFake(absl::FunctionRef<absl::Status()> launch);

// The fake's memory, streams, events and IPC (fake_backend.h says how each works), and its fault
// knobs. Owned by the FakeBackend; lives until it is destroyed, which joins the stream workers
// still alive. Thread-safe.
class FakeRuntime final : public DeviceRuntime {
 public:
  explicit FakeRuntime(const FakeOptions& options);
  ~FakeRuntime() override;
  FakeRuntime(const FakeRuntime&) = delete;
  FakeRuntime& operator=(const FakeRuntime&) = delete;

  // DeviceRuntime.
  absl::string_view Name() const override { return "fake"; }
  int DeviceCount() override { return options_.device_count; }
  absl::StatusOr<void*> Alloc(int device, size_t bytes) override;
  absl::StatusOr<void*> AllocManaged(int device, size_t bytes) override;
  void Free(int device, void* p) override;
  absl::StatusOr<void*> HostAllocPinned(size_t bytes) override;
  void HostFreePinned(void* p) override;
  absl::Status HostRegister(void* p, size_t n) override;
  absl::Status HostUnregister(void* p) override;
  PointerInfo Classify(const void* p) override;
  absl::Status Copy(int device, void* dst, const void* src, size_t n, CopyKind kind) override;
  absl::Status Memset(int device, void* p, int value, size_t n) override;
  absl::StatusOr<void*> CreateStream(int device) override;
  void DestroyStream(void* stream) override;
  absl::Status SynchronizeStream(void* stream) override;
  absl::Status BatchCopyAsync(void* stream, const CopyRegion* regions, int n) override;
  absl::Status LaunchHostFunc(void* stream, std::function<void()> fn) override;
  absl::StatusOr<void*> CreateEvent(int device) override;
  void DestroyEvent(void* event) override;
  absl::Status RecordEvent(void* event, void* stream) override;
  absl::StatusOr<bool> EventDone(void* event) override;
  absl::Status WaitEvent(void* event) override;
  absl::Status StreamWaitEvent(void* stream, void* event) override;
  absl::StatusOr<std::string> ExportIpc(const void* p) override;
  absl::StatusOr<void*> OpenIpc(int device, absl::string_view blob) override;
  absl::Status CloseIpc(void* mapped) override;
  absl::StatusOr<DeviceUuid> DeviceUuidOf(int device) override;

  // FakeBackend's knobs, as it documents them.
  int ContextsCreated(int device);
  void SetHostRegisterDelay(absl::Duration delay);
  uint64_t DefaultStreamOps() { return default_stream_ops_.load(std::memory_order_relaxed); }
  uint64_t SynchronousCopies() { return synchronous_copies_.load(std::memory_order_relaxed); }
  void FailNthAllocation(int n);
  void InjectStickyCopyError();
  void FailNextIpcOpen();
  [[nodiscard]] absl::StatusOr<void*> CreateEngineStream(int device, absl::Duration hold);
  void SetOpDelay(absl::Duration delay);
  void SetStrictPinned(bool strict);

  // For the kernels.
  // INVALID_ARGUMENT naming `device` unless it is in range; the device then has a context
  // (ContextsCreated).
  [[nodiscard]] absl::Status CheckDevice(const char* op, int device);
  // INVALID_ARGUMENT unless p is device or managed memory.
  [[nodiscard]] absl::Status CheckOnDevice(const char* op, const char* name, const void* p);
  // Where the copy engine touches [p, p + n): the alias for device and managed memory, p itself
  // for host memory (refused when `strict` and strict pinned mode is on, unless pinned).
  [[nodiscard]] absl::StatusOr<unsigned char*> Translate(const char* op, const char* name,
                                                         const void* p, size_t n, bool strict);
  // Strict pinned mode (FakeOptions::strict_pinned) is on.
  bool Strict();
  // Runs one copy on the alias views, unless the backend is broken or a fault is due.
  [[nodiscard]] absl::Status Execute(absl::FunctionRef<absl::Status()> copy);
  // Runs `op` now (stream == nullptr: the synchronous default stream) or queues it.
  [[nodiscard]] absl::Status Submit(const char* name, void* stream, FakeStream::Op op);
  // Copies regions[0..n) on `stream` (BatchCopyAsync, and the fake's BatchCopy kernel).
  [[nodiscard]] absl::Status CopyRegions(const char* op, void* stream, const CopyRegion* regions,
                                         int n);

 private:
  // One range the fake knows: device or managed memory (`map`), or pinned host memory.
  struct Region {
    MemoryKind kind = MemoryKind::kHost;
    int device = -1;
    FakeMapping map;   // kDevice, kManaged
    size_t bytes = 0;  // usable bytes from the start address
    // kDevice mapped by OpenIpc: the exporter's allocation (its pid, start time and memfd
    // inode), and the opens not yet closed by the offset of the pointer each returned. As CUDA
    // does, an open of a handle this process already has open returns the same pointer and
    // counts it; the mapping goes at the last close.
    bool ipc_opened = false;
    std::tuple<int64_t, uint64_t, uint64_t> ipc_source;
    std::map<uint64_t, int> ipc_opens;
    bool owned_host = false;  // kPinnedHost from HostAllocPinned (munmap on free), not registered
  };

  absl::StatusOr<void*> AllocRegion(const char* op, int device, size_t bytes, MemoryKind kind);
  // Gives a region's memory back; `start` is its key (used for pinned memory we mapped).
  static void Release(uintptr_t start, Region& region);
  // Adds a range and widens the span Classify checks first (never narrowed: a stale span only
  // costs a lookup).
  void InsertLocked(uintptr_t start, Region region) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The region holding p, or regions_.end().
  std::map<uintptr_t, Region>::const_iterator FindLocked(const void* p) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRange(const char* op, int device) const;
  absl::Status Sticky();
  void* AddStream(std::unique_ptr<FakeStream> stream);
  absl::StatusOr<FakeStream*> FindStream(const char* op, void* stream);
  absl::StatusOr<std::shared_ptr<FakeEvent>> FindEvent(const char* op, void* event);
  DeviceUuid Uuid(int device) const;
  // The pointer at `offset` into this process's open mapping of `source` with its count raised;
  // null when there is none.
  void* ReopenLocked(const std::tuple<int64_t, uint64_t, uint64_t>& source, uint64_t offset)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FakeOptions options_;
  common::Mutex mu_;
  // The device's one copy engine: copies and kernels from every stream and the default stream
  // run one at a time on the alias views, so a synchronous Copy reading a range a stream writes
  // sees either the old bytes or the new ones, never half of each (and TSan sees the order).
  common::Mutex engine_mu_;
  // Keyed by start address; ranges never overlap.
  std::map<uintptr_t, Region> regions_ ABSL_GUARDED_BY(mu_);
  // [span_begin_, span_end_) covers every range ever in regions_; written under mu_, read
  // without it by Classify.
  std::atomic<uintptr_t> span_begin_{UINTPTR_MAX};
  std::atomic<uintptr_t> span_end_{0};
  std::map<void*, std::unique_ptr<FakeStream>> streams_ ABSL_GUARDED_BY(mu_);
  std::map<void*, std::shared_ptr<FakeEvent>> events_ ABSL_GUARDED_BY(mu_);
  std::set<int> contexts_ ABSL_GUARDED_BY(mu_);  // devices with a context (ContextsCreated)
  std::atomic<uint64_t> default_stream_ops_{0};
  std::atomic<uint64_t> synchronous_copies_{0};
  absl::Duration host_register_delay_ ABSL_GUARDED_BY(mu_);
  int alloc_countdown_ ABSL_GUARDED_BY(mu_) = 0;
  bool inject_sticky_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_next_ipc_open_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status sticky_ ABSL_GUARDED_BY(mu_);
  absl::Duration op_delay_ ABSL_GUARDED_BY(mu_);
  bool strict_pinned_ ABSL_GUARDED_BY(mu_);
};

}  // namespace granary::device::internal
