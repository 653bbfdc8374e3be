#pragma once

// The fake device backend: what CI without a GPU runs every device path against. Test code, in a
// library of its own (granary::device_fake; CMakeLists.txt here says who links it), built also
// without CUDA. Chosen only explicitly (GRANARY_DEVICE_BACKEND=fake in a binary that links it,
// or SetBackendForTesting with an instance made here).
//
// Device memory: each allocation is a memfd mapped twice, a PROT_NONE view whose addresses are
// handed out as device pointers, and a read-write alias that only the fake's copy engine uses.
// A CPU access through a device pointer therefore faults, as it would on a GPU. Managed memory is
// an ordinary shared read-write mapping. Pinned memory is host memory the fake remembers.
//
// Streams: one worker thread each, running its queue in FIFO order, waiting `op_delay` before
// every operation. Events complete when the work queued before them has.
//
// IPC: ExportIpc describes {exporter pid and start time, memfd fd number and inode, offset, size,
// device, fake UUID}; OpenIpc in another process opens /proc/<pid>/fd/<fd> and maps it the same
// PROT_NONE + alias way. The memfd, not a named shm object, because it dies with the exporter as
// a CUDA export does: a crashed test leaves nothing in /dev/shm, and an open after the exporter
// died fails (UNAVAILABLE) instead of reading a stale object. Needs the opener to be allowed to
// read the exporter's /proc/<pid>/fd (same user, same PID namespace).
//
// Kernels: GatherBlocks, ScatterBlocks, BatchCopy and BatchChecksum run the CPU references on
// the alias views; CompareExchange64 swaps with std::atomic_ref there.
//
// Files: fake_runtime.h (the runtime: fake_runtime.cc memory, fake_streams.cc streams and events,
// fake_ipc.cc IPC), fake_kernels.h (the kernels), fake_memory.h (the mappings and the IPC handle),
// fake_stream.h (the stream workers).
//
// Differences from CUDA a caller may see: DestroyStream waits for the stream's queued work (CUDA
// returns at once); a stream or event handle of another backend is refused (INVALID_ARGUMENT)
// instead of being undefined. As on a GPU, freeing memory that queued work still uses is
// undefined (here: a fault in the stream worker).
//
// Thread safety: every method may be called from any thread. The owner keeps the backend alive
// until every stream's work is done; destruction joins the stream workers still alive.

#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "device/device_backend.h"

namespace granary::device {

struct FakeOptions {
  // Number of fake devices (>= 1).
  int device_count = 1;
  // Waited by a stream worker before each operation it runs (copies, kernels, host functions,
  // events), so that code that reads before it synchronizes sees the old bytes.
  absl::Duration op_delay = absl::ZeroDuration();
  // CopyAsync, BatchCopyAsync and the kernels on a stream refuse pageable host memory
  // (FAILED_PRECONDITION): host buffers must be HostAllocPinned or HostRegister'ed, as fast
  // staging needs on a GPU. The synchronous Copy and Memset always accept pageable memory.
  bool strict_pinned = false;
  // The first byte of every device's fake UUID; byte 15 is the device index. Two processes with
  // the same seed see the same devices, as two processes on one GPU host do.
  uint8_t uuid_seed = 0xfa;
};

class FakeBackend : public DeviceBackend {
 public:
  // INVALID_ARGUMENT naming the field for a bad option.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<FakeBackend>> Create(
      const FakeOptions& options);

  // The calling thread's last error as the fake keeps it (cudaPeekAtLastError; OK: none). CUDA
  // keeps one such slot per host thread for the whole process: a failing call, or a poll that
  // finds the work unfinished (cudaEventQuery's cudaErrorNotReady), leaves its error there until
  // cudaGetLastError reads and clears it, and a kernel launch's status is read from it. The fake
  // keeps one per thread the same way: EventDone sets it for an unfinished event, and the kernels
  // (GatherBlocks, ScatterBlocks, BatchCopy, BatchChecksum, CompareExchange64) report what it
  // holds after their launch.
  static absl::Status PeekAtLastError();

  // The contexts this fake created on `device`: 0 until the first call that creates a CUDA
  // primary context there on a GPU, then 1. Such calls: allocations, copies, memsets, streams,
  // events, kernels and IPC opens on `device`, and pinned host memory (on device 0, the current
  // device of a thread that chose none). Classify, DeviceCount and DeviceUuidOf create none, as
  // on CUDA (the cuda backend classifies through the driver; a device query needs no context).
  // Lets a test assert that a host-only client creates none, and that a GPU segment is mapped
  // only on the device of the caller's buffer.
  virtual int ContextsCreated(int device) = 0;

  // HostRegister takes `delay` from now on: the range counts as registered at once (a second
  // registration overlapping it fails, as cudaErrorHostMemoryAlreadyRegistered does), and the call
  // returns after `delay`, as a registration of a GiB takes long on CUDA.
  virtual void SetHostRegisterDelay(absl::Duration delay) = 0;

  // Operations run on the default stream (a null `stream`) so far: copies, kernels and host
  // functions; not the synchronous setup calls Copy and Memset. On CUDA that is the legacy
  // stream, which waits for an engine's work on blocking streams, makes the engine's later work
  // wait, is unusable while the engine captures a CUDA graph, and runs on the calling thread's
  // current device; so a test can assert that a client path stays off it.
  virtual uint64_t DefaultStreamOps() = 0;
  // Synchronous copies (Copy) so far, which the counter above leaves out. On CUDA a cudaMemcpy
  // runs on the legacy default stream too, with the same waits, and blocks the caller: a data
  // path must not use it (a test's setup may).
  virtual uint64_t SynchronousCopies() = 0;

  // Fault injection. Each takes effect for later calls, from any thread.
  // The n-th Alloc or AllocManaged from now (1: the next) fails with RESOURCE_EXHAUSTED; 0 clears.
  virtual void FailNthAllocation(int n) = 0;
  // The next copy a stream worker (or a synchronous call) runs fails with INTERNAL, like an
  // illegal address on a GPU, and so does every later copy, kernel, enqueue and synchronize:
  // the error is sticky for the backend's life.
  virtual void InjectStickyCopyError() = 0;
  // The next OpenIpc fails with INTERNAL.
  virtual void FailNextIpcOpen() = 0;
  // An "engine stream" (the stream an engine's kernels write KV on, for tests of the stream
  // contract, include/granary/client.h): an ordinary stream handle of this backend whose
  // operations run only once released, so a write enqueued on it stays invisible to every
  // other stream and to synchronous copies until that stream is synchronized, an event
  // recorded on it is waited for (WaitEvent, StreamWaitEvent), or `hold` has passed since the
  // write was enqueued. Destroyed with DestroyStream. INVALID_ARGUMENT for a bad device or a
  // negative hold.
  [[nodiscard]] virtual absl::StatusOr<void*> CreateEngineStream(int device,
                                                                 absl::Duration hold) = 0;
  // Changes FakeOptions::op_delay for operations enqueued from now on.
  virtual void SetOpDelay(absl::Duration delay) = 0;
  virtual void SetStrictPinned(bool strict) = 0;
};

}  // namespace granary::device
