#pragma once

// Private to cuda/, compiled only with CUDA: the cuda backend's versions of kv_layout.h's GPU
// calls and of the batched checksum (kv_layout_gpu.cc), with the same contract; `stream` is a
// cudaStream_t or nullptr.

#include <cstdint>

#include "absl/status/status.h"
#include "cuda/checksum.h"
#include "cuda/kv_layout.h"

namespace granary::cuda::internal {

[[nodiscard]] absl::Status GatherBlocksCuda(int device, const PagedKvLayout& layout,
                                            const void* k_cache, const void* v_cache,
                                            const int32_t* block_ids, int n, void* out,
                                            void* stream);
[[nodiscard]] absl::Status ScatterBlocksCuda(int device, const PagedKvLayout& layout,
                                             const void* in, const int32_t* block_ids, int n,
                                             void* k_cache, void* v_cache, void* stream);
[[nodiscard]] absl::Status BatchCopyCuda(int device, const CopyRegion* regions, int n,
                                         void* stream);
// DeviceBackend::BatchChecksum (kernels.h's LaunchBatchChecksum); `out` is checked by the
// caller.
[[nodiscard]] absl::Status BatchChecksumCuda(int device, const ChecksumRegion* regions, int n,
                                             uint64_t* out, void* stream);

}  // namespace granary::cuda::internal
