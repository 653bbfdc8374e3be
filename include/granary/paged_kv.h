#pragma once

// Paged KV on top of a Client: an engine's paged KV cache stored and loaded block list by block
// list, through the client's zero-copy calls (Client::BatchPutFrom, Client::BatchGetInto).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "granary/client.h"

namespace granary {

// An engine's paged KV cache on one device (or in host memory): per layer, a K and a V cache of
// [num_blocks, block_size, num_heads, head_dim] elements of elem_bytes (1, 2 or 4) each; a
// block_stride_bytes above the dense block size describes caches that interleave K and V per
// block ([num_blocks, 2, block_size, num_heads, head_dim]: stride 2 x block, v = k + block).
// The value stored for a list of blocks is [K(b0) | V(b0) | K(b1) | V(b1) | ...].
struct PagedKvCache {
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t elem_bytes = 0;
  int64_t block_stride_bytes = 0;  // 0: dense
  void* k_cache = nullptr;
  void* v_cache = nullptr;
};

// Options of PagedKv::Put and PagedKv::Get.
struct PagedKvOptions {
  // Off by default. On: Put stores each value as the gathered blocks followed by a 16-byte
  // trailer {u32 magic "GKVC", u32 algorithm 1, u64 checksum of the blocks} (little-endian),
  // the checksums of the batch computed in one launch on the caches' device (the CPU reference
  // for host caches); Get expects that trailer, recomputes the checksum of every value (one
  // launch) and scatters only the values that match: a mismatch is DATA_LOSS naming the key and
  // both checksums. A value stored without the trailer read with checksum on, or with it read
  // with checksum off, is FAILED_PRECONDITION saying so; nothing of it is scattered.
  // Costs one more launch and a round trip of 8 + 16 bytes per key each way.
  bool checksum = false;
  // Put waits for it before it gathers the blocks (DeviceWait, the stream contract in
  // granary/client.h); Get ignores it.
  DeviceWait wait;
};

// Paged KV for one Client: Put stores keys[i] as the blocks block_ids[i] of `cache`, one
// contiguous value per key, gathered for the whole batch in one kernel launch (the CPU
// reference for host caches) into one staging buffer that Client::BatchPutFrom then writes; Get
// reads the values into staging with Client::BatchGetInto and scatters them back into those
// blocks (one launch for the batch). INVALID_ARGUMENT names a bad layout field, an empty block
// list or a block id out of range (and, for Get, a block listed twice in the batch); a stored
// value whose size is not the layout's for its block count is FAILED_PRECONDITION and scatters
// nothing. `options` adds the checksum (PagedKvOptions); one status per key.
//
// The staging buffers (device memory for device caches) and the streams of the launches are
// this object's, made on first use and kept for reuse until it is destroyed: a cudaMalloc and
// cudaFree per call would wait for the whole device, the engine's kernels included. So keep one
// PagedKv per client, not one per call. Its device work runs on non-blocking streams of the
// caches' device, never on the legacy default stream.
//
// Thread-safe: any number of threads may call Put and Get at once, as they may the client's
// own methods. The client must outlive this object.
class PagedKv {
 public:
  explicit PagedKv(Client& client);
  ~PagedKv();
  PagedKv(const PagedKv&) = delete;
  PagedKv& operator=(const PagedKv&) = delete;

  std::vector<absl::Status> Put(absl::Span<const std::string> keys, const PagedKvCache& cache,
                                absl::Span<const std::vector<int32_t>> block_ids,
                                const PagedKvOptions& options = {});
  std::vector<absl::Status> Get(absl::Span<const std::string> keys, const PagedKvCache& cache,
                                absl::Span<const std::vector<int32_t>> block_ids,
                                const PagedKvOptions& options = {});

 private:
  struct Staging;  // the staging buffers and streams (src/client/paged_kv.cc)
  Client& client_;
  const std::unique_ptr<Staging> staging_;
};

}  // namespace granary
