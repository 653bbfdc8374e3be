#pragma once

// Private to device/: the launcher of the 64-bit compare-and-swap kernel (cas_kernel.cu) behind
// KvKernels::CompareExchange64 of the cuda backend. Free of absl, so nvcc never parses it.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device/cas_op.h"

namespace granary::device::internal {

// Enqueues on `stream` (on the current device) one launch that runs atomicCAS for each of
// ops[0..n) (a host array, uploaded to a stream-ordered table first; it may be released when
// this returns). Returns the first CUDA error of the enqueue; does not wait.
cudaError_t LaunchCompareExchange64(const CasOp64* ops, int n, cudaStream_t stream);

}  // namespace granary::device::internal
