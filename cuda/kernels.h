#pragma once

// Private to cuda/: the kernel launchers in kernels.cu. Free of absl so that nvcc never parses
// it; the host code in kv_layout_gpu.cc turns the cudaError_t into a Status.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/copy_region.h"

namespace granary::cuda::internal {

// Enqueues on `stream` (on the current device) one kernel launch that copies chunks[0..n), each
// of a non-zero size the caller has bounded (SplitIntoChunks). `chunks` is a host array and may
// be released when this returns. n <= kInlineChunks travels in the kernel's parameters;
// a longer list is uploaded to a stream-ordered (cudaMallocAsync) table first. Returns the
// first CUDA error of the enqueue; does not wait for the copy.
cudaError_t LaunchBatchCopy(const CopyRegion* chunks, int64_t n, cudaStream_t stream);

// Chunk lists up to this long need no device-side table (24 bytes each: under the classic
// 4 KiB kernel-parameter limit).
inline constexpr int kInlineChunks = 128;

}  // namespace granary::cuda::internal
