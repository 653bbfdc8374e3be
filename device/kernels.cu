// Batched copy kernel: the GPU half of kv_layout.h (gather and scatter are region lists run
// through it), and the batched checksum of checksum.h. Kept free of absl and of host-only headers
// so that nvcc compiles it quickly.
//
// Work split: one thread block per chunk (grid-stride over chunks). Chunks are at most
// kMaxChunkBytes (64 KiB), so a block of 256 threads moves a chunk in at most 16 rounds of
// 16-byte loads; a list of 32 KiB KV blocks spreads over every SM. The copy width is the widest
// of 16/8/4/1 bytes that both the source and destination addresses allow; the remainder past
// the last full word is copied byte by byte.

#include <cstdint>
#include <cstring>
#include <vector>

#include "device/kernels.h"
#include "device/launch_status.h"

namespace granary::device::internal {
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

// Checksums (see kernels.h): one piece of one region per block.
struct ChecksumPiece {
  const unsigned char* data = nullptr;  // the region's start
  uint64_t bytes = 0;                   // the region's length
  uint64_t first_word = 0;              // the piece's words: [first_word, end_word)
  uint64_t end_word = 0;
  uint64_t region = 0;  // index of the region's sum
};
static_assert(sizeof(ChecksumPiece) % sizeof(uint64_t) == 0);
constexpr uint64_t kPieceWords = kChecksumPieceBytes / 8;
constexpr int kWarps = kThreads / 32;

// Word i of a region: 8 bytes little-endian (as the GPU is), the last one zero-padded. One 8-byte
// load when the region is 8-byte aligned, else byte loads.
__device__ uint64_t LoadWord(const unsigned char* p, uint64_t bytes, uint64_t i, bool aligned) {
  const uint64_t at = i * 8;
  if (aligned && at + 8 <= bytes) return reinterpret_cast<const uint64_t*>(p)[i];
  uint64_t word = 0;
  const uint64_t end = at + 8 < bytes ? at + 8 : bytes;
  for (uint64_t b = at; b < end; ++b) word |= static_cast<uint64_t>(p[b]) << (8 * (b - at));
  return word;
}

__global__ void __launch_bounds__(kThreads)
    ChecksumPieces(const ChecksumPiece* pieces, int64_t n, unsigned long long* sums) {
  __shared__ unsigned long long warp_sums[kWarps];
  for (int64_t c = blockIdx.x; c < n; c += gridDim.x) {
    const ChecksumPiece piece = pieces[c];
    const bool aligned = (reinterpret_cast<uintptr_t>(piece.data) & 7) == 0;
    unsigned long long sum = 0;
    for (uint64_t i = piece.first_word + threadIdx.x; i < piece.end_word; i += blockDim.x) {
      sum += ChecksumTerm(LoadWord(piece.data, piece.bytes, i, aligned), i);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      sum += __shfl_down_sync(0xffffffffu, sum, offset);
    }
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long total = 0;
      for (int w = 0; w < kWarps; ++w) total += warp_sums[w];
      atomicAdd(&sums[piece.region], total);  // wraps mod 2^64, as the reference's sum
    }
    __syncthreads();  // warp_sums is reused by the next piece
  }
}

__global__ void __launch_bounds__(kThreads)
    FinishChecksums(unsigned long long* sums, const uint64_t* lengths, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    sums[i] = ChecksumFinish(sums[i], lengths[i]);
  }
}

}  // namespace

cudaError_t LaunchBatchChecksum(const ChecksumRegion* regions, int n, uint64_t* out,
                                cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  // Host image of the device block after the n sums: n lengths, then the piece table.
  std::vector<ChecksumPiece> pieces;
  std::vector<uint64_t> lengths(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    lengths[r] = regions[r].bytes;
    const uint64_t words = (regions[r].bytes + 7) / 8;
    for (uint64_t w = 0; w < words; w += kPieceWords) {
      pieces.push_back({static_cast<const unsigned char*>(regions[r].data), regions[r].bytes, w,
                        w + kPieceWords < words ? w + kPieceWords : words,
                        static_cast<uint64_t>(r)});
    }
  }
  const size_t table_words = lengths.size() + pieces.size() * sizeof(ChecksumPiece) / 8;
  std::vector<uint64_t> image(table_words);
  std::memcpy(image.data(), lengths.data(), lengths.size() * 8);
  if (!pieces.empty()) {
    std::memcpy(image.data() + lengths.size(), pieces.data(),
                pieces.size() * sizeof(ChecksumPiece));
  }
  void* block = nullptr;
  const size_t sum_bytes = static_cast<size_t>(n) * 8;
  cudaError_t err = cudaMallocAsync(&block, sum_bytes + table_words * 8, stream);
  if (err != cudaSuccess) return err;
  auto* sums = static_cast<unsigned long long*>(block);
  auto* device_lengths = reinterpret_cast<uint64_t*>(sums + n);
  const auto* device_pieces = reinterpret_cast<const ChecksumPiece*>(device_lengths + n);
  err = cudaMemsetAsync(sums, 0, sum_bytes, stream);
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(device_lengths, image.data(), table_words * 8, cudaMemcpyHostToDevice,
                          stream);
  }
  if (err == cudaSuccess && !pieces.empty()) {
    const int64_t p = static_cast<int64_t>(pieces.size());
    err = LaunchStatus(cudaGetLastError, [&] {
      ChecksumPieces<<<static_cast<unsigned>(p < kMaxGrid ? p : kMaxGrid), kThreads, 0, stream>>>(
          device_pieces, p, sums);
    });
  }
  if (err == cudaSuccess) {
    const int64_t grid = (static_cast<int64_t>(n) + kThreads - 1) / kThreads;
    err = LaunchStatus(cudaGetLastError, [&] {
      FinishChecksums<<<static_cast<unsigned>(grid < kMaxGrid ? grid : kMaxGrid), kThreads, 0,
                        stream>>>(sums, device_lengths, n);
    });
  }
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(out, sums, sum_bytes, cudaMemcpyDeviceToHost, stream);
  }
  const cudaError_t free_err = cudaFreeAsync(block, stream);
  return err != cudaSuccess ? err : free_err;
}

cudaError_t LaunchBatchCopy(const CopyRegion* chunks, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(n < kMaxGrid ? n : kMaxGrid);
  if (n <= kInlineChunks) {
    InlineChunks inline_chunks;
    for (int64_t i = 0; i < n; ++i) inline_chunks.chunk[i] = chunks[i];
    return LaunchStatus(cudaGetLastError, [&] {
      BatchCopyInline<<<grid, kThreads, 0, stream>>>(inline_chunks, static_cast<int>(n));
    });
  }
  const size_t table_bytes = static_cast<size_t>(n) * sizeof(CopyRegion);
  void* table = nullptr;
  cudaError_t err = cudaMallocAsync(&table, table_bytes, stream);
  if (err != cudaSuccess) return err;
  err = cudaMemcpyAsync(table, chunks, table_bytes, cudaMemcpyHostToDevice, stream);
  if (err == cudaSuccess) {
    err = LaunchStatus(cudaGetLastError, [&] {
      BatchCopyTable<<<grid, kThreads, 0, stream>>>(static_cast<const CopyRegion*>(table), n);
    });
  }
  const cudaError_t free_err = cudaFreeAsync(table, stream);
  return err != cudaSuccess ? err : free_err;
}

}  // namespace granary::device::internal
