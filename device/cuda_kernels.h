#pragma once

// Private to device/, compiled only with CUDA: the cuda backend's kernels (kv_kernels.h), launched
// through kernels.cu and cas_kernel.cu; `stream` is a cudaStream_t or nullptr.

#include "device/kv_kernels.h"

namespace granary::device::internal {

// The process-wide instance. Stateless, so thread-safe; lives for the process.
KvKernels& CudaKernels();

}  // namespace granary::device::internal
