#pragma once

// Granary's kernels, the other half of a device backend (device_backend.h): moving KV blocks
// between an engine's paged cache and a contiguous buffer, batched copies, batched checksums and
// compare-and-swap, each one launch on a device. They run on the memory and the streams of their
// backend's runtime (device_runtime.h), never on another backend's. The error codes are the
// runtime's.
//
// This header is CUDA-free. Thread safety: every method of every implementation may be called
// from any thread.

#include <cstdint>

#include "absl/status/status.h"
#include "device/cas_op.h"
#include "device/checksum.h"
#include "device/copy_region.h"
#include "device/kv_layout.h"

namespace granary::device {

class KvKernels {
 public:
  virtual ~KvKernels() = default;

  // kv_layout.h's GPU calls, with the same semantics (stream nullptr: synchronous).
  [[nodiscard]] virtual absl::Status GatherBlocks(int device, const PagedKvLayout& layout,
                                                  const void* k_cache, const void* v_cache,
                                                  const int32_t* block_ids, int n, void* out,
                                                  void* stream) = 0;
  [[nodiscard]] virtual absl::Status ScatterBlocks(int device, const PagedKvLayout& layout,
                                                   const void* in, const int32_t* block_ids, int n,
                                                   void* k_cache, void* v_cache, void* stream) = 0;
  [[nodiscard]] virtual absl::Status BatchCopy(int device, const CopyRegion* regions, int n,
                                               void* stream) = 0;

  // out[i] = the checksum of regions[i] (checksum.h; ChecksumCpu is the reference) for i in
  // [0, n): one batched launch on `device` for the whole list. Region data is device memory of
  // `device` (or memory it can address); `regions` is a host array that may be released on
  // return; `out` is host memory of n values, written when the work completes (stream nullptr:
  // before return; otherwise the caller synchronizes the stream before reading it). n == 0 is a
  // no-op. INVALID_ARGUMENT names a bad value (ValidateChecksumRegions; `out` in device memory).
  [[nodiscard]] virtual absl::Status BatchChecksum(int device, const ChecksumRegion* regions, int n,
                                                   uint64_t* out, void* stream) = 0;

  // ops[0..n) as device atomics (atomicCAS), in one launch on `device`; synchronous: done on
  // return. Each swap is atomic against other device atomics. Against another process's copy
  // engine writes into the same 8-byte word (through IPC) the CUDA memory model promises nothing
  // (they are not atomics); an aligned word inside one header write is not torn in practice, so
  // such a write is expected to land wholly before the swap (which then fails) or after it. The
  // node invalidates the header of a freed allocation in GPU memory with it (node_inventory.h).
  // INVALID_ARGUMENT names an op whose pointer is null, unaligned or not device memory of this
  // backend. n == 0 is a no-op.
  [[nodiscard]] virtual absl::Status CompareExchange64(int device, const CasOp64* ops, int n) = 0;
};

}  // namespace granary::device
