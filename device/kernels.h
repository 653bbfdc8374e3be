#pragma once

// Private to device/: the kernel launchers in kernels.cu. Free of absl so that nvcc never parses
// it; the host code in cuda_kernels.cc turns the cudaError_t into a Status.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device/checksum_math.h"
#include "device/copy_region.h"

namespace granary::device::internal {

// Enqueues on `stream` (on the current device) one kernel launch that copies chunks[0..n), each
// of a non-zero size the caller has bounded (SplitIntoChunks). `chunks` is a host array and may
// be released when this returns. n <= kInlineChunks travels in the kernel's parameters;
// a longer list is uploaded to a stream-ordered (cudaMallocAsync) table first. Returns the
// first CUDA error of the enqueue; does not wait for the copy.
cudaError_t LaunchBatchCopy(const CopyRegion* chunks, int64_t n, cudaStream_t stream);

// Enqueues on `stream` (on the current device) the checksums of regions[0..n) (n > 0, validated
// by the caller), written to `out` (host memory, n values) when the stream reaches them. Each
// region is split into pieces of kChecksumPieceBytes, one thread block per piece: the block's
// threads add their words' terms, reduce in the block, and add the block's sum to its region's
// sum in device memory (atomicAdd); a second launch finishes each sum with the length, and one
// copy brings the n results back. `regions` may be released when this returns. Device memory:
// one stream-ordered allocation (n sums and lengths, and the piece table) freed on the stream.
// Returns the first CUDA error of the enqueue.
cudaError_t LaunchBatchChecksum(const ChecksumRegion* regions, int n, uint64_t* out,
                                cudaStream_t stream);

// The most bytes one thread block checksums (256 threads: 32 words each).
inline constexpr uint64_t kChecksumPieceBytes = 64 * 1024;

// Chunk lists up to this long need no device-side table (24 bytes each: under the classic
// 4 KiB kernel-parameter limit).
inline constexpr int kInlineChunks = 128;

}  // namespace granary::device::internal
