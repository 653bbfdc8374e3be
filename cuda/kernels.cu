// Batched copy kernel: the GPU half of kv_layout.h (gather and scatter are region lists run
// through it). Kept free of absl and of host-only headers so that nvcc compiles it quickly.
//
// Work split: one thread block per chunk (grid-stride over chunks). Chunks are at most
// kMaxChunkBytes (64 KiB), so a block of 256 threads moves a chunk in at most 16 rounds of
// 16-byte loads; a list of 32 KiB KV blocks spreads over every SM. The copy width is the widest
// of 16/8/4/1 bytes that both the source and destination addresses allow; the remainder past
// the last full word is copied byte by byte.

#include <cstdint>

#include "cuda/kernels.h"

namespace granary::cuda::internal {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = 65535;

struct InlineChunks {
  CopyRegion chunk[kInlineChunks];
};

template <typename Word>
__device__ void CopyWords(const unsigned char* src, unsigned char* dst, uint64_t bytes) {
  const uint64_t words = bytes / sizeof(Word);
  const Word* s = reinterpret_cast<const Word*>(src);
  Word* d = reinterpret_cast<Word*>(dst);
#pragma unroll 4
  for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
  for (uint64_t i = words * sizeof(Word) + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
}

__device__ void CopyChunk(const CopyRegion& chunk) {
  const auto* src = static_cast<const unsigned char*>(chunk.src);
  auto* dst = static_cast<unsigned char*>(chunk.dst);
  const uintptr_t align = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
  if ((align & 15) == 0) {
    CopyWords<uint4>(src, dst, chunk.bytes);
  } else if ((align & 7) == 0) {
    CopyWords<uint2>(src, dst, chunk.bytes);
  } else if ((align & 3) == 0) {
    CopyWords<uint32_t>(src, dst, chunk.bytes);
  } else {
    CopyWords<unsigned char>(src, dst, chunk.bytes);
  }
}

__global__ void __launch_bounds__(kThreads) BatchCopyInline(InlineChunks chunks, int n) {
  for (int c = blockIdx.x; c < n; c += gridDim.x) CopyChunk(chunks.chunk[c]);
}

__global__ void __launch_bounds__(kThreads) BatchCopyTable(const CopyRegion* chunks, int64_t n) {
  for (int64_t c = blockIdx.x; c < n; c += gridDim.x) CopyChunk(chunks[c]);
}

}  // namespace

cudaError_t LaunchBatchCopy(const CopyRegion* chunks, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(n < kMaxGrid ? n : kMaxGrid);
  if (n <= kInlineChunks) {
    InlineChunks inline_chunks;
    for (int64_t i = 0; i < n; ++i) inline_chunks.chunk[i] = chunks[i];
    BatchCopyInline<<<grid, kThreads, 0, stream>>>(inline_chunks, static_cast<int>(n));
    return cudaGetLastError();
  }
  const size_t table_bytes = static_cast<size_t>(n) * sizeof(CopyRegion);
  void* table = nullptr;
  cudaError_t err = cudaMallocAsync(&table, table_bytes, stream);
  if (err != cudaSuccess) return err;
  err = cudaMemcpyAsync(table, chunks, table_bytes, cudaMemcpyHostToDevice, stream);
  if (err == cudaSuccess) {
    BatchCopyTable<<<grid, kThreads, 0, stream>>>(static_cast<const CopyRegion*>(table), n);
    err = cudaGetLastError();
  }
  const cudaError_t free_err = cudaFreeAsync(table, stream);
  return err != cudaSuccess ? err : free_err;
}

}  // namespace granary::cuda::internal
