// The cuda backend's kv_layout.h kernels (kv_layout_cuda.h): validate on the host, express the
// operation as copy chunks, and run them in one launch of kernels.cu's batched copy; and the
// batched checksum (kernels.cu's LaunchBatchChecksum).

#include <cuda_runtime_api.h>

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cuda/cuda_internal.h"
#include "cuda/kernels.h"
#include "cuda/kv_layout.h"
#include "cuda/kv_layout_cuda.h"
#include "cuda/kv_regions.h"

namespace granary::cuda {
namespace {

// Runs regions (already validated) on `device`. Cost per call: one vector of chunks on the
// host, one launch; above kInlineChunks chunks also a stream-ordered table allocation and a
// host-to-device copy of it; with stream == nullptr, a synchronize of the default stream.
absl::Status RunRegions(const char* op, int device, const CopyRegion* regions, size_t n,
                        void* stream) {
  const std::vector<CopyRegion> chunks =
      internal::SplitIntoChunks(regions, n, internal::kMaxChunkBytes);
  if (chunks.empty()) return absl::OkStatus();
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (absl::Status s = internal::CudaStatus(
          internal::LaunchBatchCopy(chunks.data(), static_cast<int64_t>(chunks.size()),
                                    cuda_stream),
          absl::StrCat(op, ": launch of ", chunks.size(), " chunks on device ", device));
      !s.ok()) {
    return s;
  }
  if (stream != nullptr) return absl::OkStatus();
  return internal::CudaStatus(cudaStreamSynchronize(cuda_stream),
                              absl::StrCat(op, ": copy on device ", device));
}

}  // namespace

namespace internal {

absl::Status GatherBlocksCuda(int device, const PagedKvLayout& layout, const void* k_cache,
                              const void* v_cache, const int32_t* block_ids, int n, void* out,
                              void* stream) {
  internal::ScopedDevice scope;
  if (absl::Status s = scope.Enter(device); !s.ok()) return s;
  std::vector<CopyRegion> regions;
  if (absl::Status s = AppendGatherRegions(layout, k_cache, v_cache, block_ids, n, out, &regions);
      !s.ok()) {
    return s;
  }
  return RunRegions("GatherBlocksGpu", device, regions.data(), regions.size(), stream);
}

absl::Status ScatterBlocksCuda(int device, const PagedKvLayout& layout, const void* in,
                               const int32_t* block_ids, int n, void* k_cache, void* v_cache,
                               void* stream) {
  internal::ScopedDevice scope;
  if (absl::Status s = scope.Enter(device); !s.ok()) return s;
  std::vector<CopyRegion> regions;
  if (absl::Status s = AppendScatterRegions(layout, in, block_ids, n, k_cache, v_cache, &regions);
      !s.ok()) {
    return s;
  }
  return RunRegions("ScatterBlocksGpu", device, regions.data(), regions.size(), stream);
}

absl::Status BatchCopyCuda(int device, const CopyRegion* regions, int n, void* stream) {
  internal::ScopedDevice scope;
  if (absl::Status s = scope.Enter(device); !s.ok()) return s;
  if (absl::Status s = internal::ValidateRegions(regions, n); !s.ok()) return s;
  return RunRegions("BatchCopyGpu", device, regions, static_cast<size_t>(n), stream);
}

absl::Status BatchChecksumCuda(int device, const ChecksumRegion* regions, int n, uint64_t* out,
                               void* stream) {
  internal::ScopedDevice scope;
  if (absl::Status s = scope.Enter(device); !s.ok()) return s;
  if (absl::Status s = ValidateChecksumRegions(regions, n, out); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (absl::Status s = internal::CudaStatus(
          internal::LaunchBatchChecksum(regions, n, out, cuda_stream),
          absl::StrCat("BatchChecksum: launch over ", n, " regions on device ", device));
      !s.ok()) {
    return s;
  }
  if (stream != nullptr) return absl::OkStatus();
  return internal::CudaStatus(cudaStreamSynchronize(cuda_stream),
                              absl::StrCat("BatchChecksum on device ", device));
}

}  // namespace internal
}  // namespace granary::cuda
