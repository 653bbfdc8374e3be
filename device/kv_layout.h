#pragma once

// Moving KV blocks between an engine's paged KV cache and the contiguous buffer that Granary
// stores (docs/architecture.md section 7). Every operation has a CPU reference (`...Cpu`, host
// pointers, always built) and a GPU version (`...Gpu`, device pointers) that must produce the same
// bytes; the GPU versions return FAILED_PRECONDITION in a build without CUDA.
//
// Layout of one layer: the K cache and the V cache are each [num_blocks, block_size, num_heads,
// head_dim] elements of `elem_bytes` bytes, so one block of K (or V) is one contiguous run of
// BlockBytes() bytes, and block b starts at b * BlockStride() bytes from the cache's base.
//
// Gathered buffer (what is stored under one key), for block_ids[0..n):
//
//   [K(block_ids[0]) | V(block_ids[0]) | K(block_ids[1]) | V(block_ids[1]) | ...]
//
// that is, K then V for each block, blocks in list order, 2 * n * BlockBytes() bytes in all.
// Scatter is the exact inverse. Within one block the element order is the cache's own
// ([block_size, num_heads, head_dim]); nothing is transposed.
//
// Thread safety: all functions are reentrant; concurrent calls must not write overlapping
// memory. Overlapping source and destination in one call is undefined (as for memcpy).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "device/copy_region.h"  // CopyRegion

namespace granary::device {

struct PagedKvLayout {
  int64_t num_blocks = 0;  // blocks in each of the K and V caches
  int64_t block_size = 0;  // tokens per block
  int64_t num_heads = 0;   // KV heads
  int64_t head_dim = 0;
  int64_t elem_bytes = 0;  // bytes per element: 2 for fp16/bf16, 1 for fp8, 4 for fp32
  // Distance in bytes between consecutive blocks of one cache; 0 means dense (BlockBytes()).
  // A larger stride describes caches that interleave K and V per block, such as
  // [num_blocks, 2, block_size, num_heads, head_dim]: stride 2 * BlockBytes(), and
  // v_cache = k_cache + BlockBytes().
  int64_t block_stride_bytes = 0;

  // OK when every dimension is positive, the stride is 0 or at least BlockBytes(), and
  // num_blocks * BlockStride() fits in int64. Otherwise INVALID_ARGUMENT naming the field.
  [[nodiscard]] absl::Status Validate() const;

  // The following assume Validate().ok().
  size_t BlockBytes() const;
  size_t BlockStride() const;
  // Size of the gathered buffer for n blocks: 2 * n * BlockBytes().
  size_t GatheredBytes(int n) const;
};

// Checks the arguments shared by every gather and scatter: a valid layout, n >= 0, non-null
// pointers when n > 0, and every block id in [0, num_blocks). Scatter also rejects a block id
// listed twice (its result would depend on write order). INVALID_ARGUMENT names the bad value
// and its position.
[[nodiscard]] absl::Status ValidateBlockIds(const PagedKvLayout& layout, const int32_t* block_ids,
                                            int n, bool reject_duplicates);

// Copies blocks block_ids[0..n) of k_cache and v_cache into `out` (GatheredBytes(n) bytes), in
// the order described above.
[[nodiscard]] absl::Status GatherBlocksCpu(const PagedKvLayout& layout, const void* k_cache,
                                           const void* v_cache, const int32_t* block_ids, int n,
                                           void* out);

// The inverse of GatherBlocksCpu: writes `in` (GatheredBytes(n) bytes) into the listed blocks.
[[nodiscard]] absl::Status ScatterBlocksCpu(const PagedKvLayout& layout, const void* in,
                                            const int32_t* block_ids, int n, void* k_cache,
                                            void* v_cache);

// The copies GatherBlocksCpu makes, as regions appended to *regions (2 * n of them, K then V per
// block into consecutive BlockBytes() slices of `out`), and those of ScatterBlocksCpu (source and
// destination swapped; duplicate block ids rejected). Validated like the CPU calls; nothing is
// appended on an error. For callers that batch gathers into (or scatters out of) several buffers
// into one BatchCopyGpu launch (or BatchCopyCpu): cost one vector append per region.
[[nodiscard]] absl::Status AppendGatherRegions(const PagedKvLayout& layout, const void* k_cache,
                                               const void* v_cache, const int32_t* block_ids, int n,
                                               void* out, std::vector<CopyRegion>* regions);
[[nodiscard]] absl::Status AppendScatterRegions(const PagedKvLayout& layout, const void* in,
                                                const int32_t* block_ids, int n, void* k_cache,
                                                void* v_cache, std::vector<CopyRegion>* regions);

// memcpy of each of regions[0..n). A region with bytes > 0 needs non-null src and dst.
[[nodiscard]] absl::Status BatchCopyCpu(const CopyRegion* regions, int n);

// GPU versions. Cache, buffer and region pointers are device pointers on `device` (or memory
// the device can address); `block_ids` and `regions` themselves are host arrays, validated on
// the host before anything is launched. Each call is one kernel launch (large regions are split
// into chunks inside that launch).
//
// `stream` is a cudaStream_t of `device` passed as void* (see Stream in device.h). nullptr (the
// default): the call runs on the device's default stream and returns after the copy has completed.
// Otherwise the work is enqueued on `stream` and the call returns at once; only launch errors are
// reported, and the caller synchronizes the stream before using the result. The host arrays may be
// released as soon as the call returns either way.
[[nodiscard]] absl::Status GatherBlocksGpu(int device, const PagedKvLayout& layout,
                                           const void* k_cache, const void* v_cache,
                                           const int32_t* block_ids, int n, void* out,
                                           void* stream = nullptr);
[[nodiscard]] absl::Status ScatterBlocksGpu(int device, const PagedKvLayout& layout, const void* in,
                                            const int32_t* block_ids, int n, void* k_cache,
                                            void* v_cache, void* stream = nullptr);
[[nodiscard]] absl::Status BatchCopyGpu(int device, const CopyRegion* regions, int n,
                                        void* stream = nullptr);

}  // namespace granary::device
