#pragma once

// Private to the fake backend (fake_backend.h): its kernels, the CPU references (kv_layout.h,
// checksum.h) run on the alias views of its runtime's memory (fake_runtime.h), on its streams.

#include <cstdint>

#include "absl/status/statusor.h"
#include "device/fake/fake_runtime.h"
#include "device/kv_kernels.h"

namespace granary::device::internal {

// Owned by the FakeBackend next to `runtime`, which outlives it. Thread-safe. Cost per launch:
// one lock round trip per pointer translated, a copy of the host arrays (block ids, checksum
// regions) into the stream operation, and the stream's own cost (fake_stream.h).
class FakeKernels final : public KvKernels {
 public:
  explicit FakeKernels(FakeRuntime* runtime) : runtime_(*runtime) {}

  absl::Status GatherBlocks(int device, const PagedKvLayout& layout, const void* k_cache,
                            const void* v_cache, const int32_t* block_ids, int n, void* out,
                            void* stream) override;
  absl::Status ScatterBlocks(int device, const PagedKvLayout& layout, const void* in,
                             const int32_t* block_ids, int n, void* k_cache, void* v_cache,
                             void* stream) override;
  absl::Status BatchCopy(int device, const CopyRegion* regions, int n, void* stream) override;
  absl::Status BatchChecksum(int device, const ChecksumRegion* regions, int n, uint64_t* out,
                             void* stream) override;
  absl::Status CompareExchange64(int device, const CasOp64* ops, int n) override;

 private:
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
                                              const void* k_cache, const void* v_cache);
  // A gather (or a scatter, `scatter`) of blocks block_ids[0..n) between the caches and
  // `buffer`, launched on `stream`.
  absl::Status MoveBlocks(const char* op, int device, const PagedKvLayout& layout,
                          const int32_t* block_ids, int n, bool scatter, const void* buffer,
                          const void* k_cache, const void* v_cache, void* stream);

  FakeRuntime& runtime_;
};

}  // namespace granary::device::internal
