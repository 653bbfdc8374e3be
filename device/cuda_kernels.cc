// The cuda backend's kernels (cuda_kernels.h): gathers, scatters and batched copies validate on
// the host, become copy chunks and run in one launch of kernels.cu's batched copy; the batched
// checksum is kernels.cu's LaunchBatchChecksum, the compare-and-swap cas_kernel.cu's.

#include "device/cuda_kernels.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "device/cas_kernel.h"
#include "device/cuda_internal.h"
#include "device/driver_api.h"
#include "device/kernels.h"
#include "device/kv_layout.h"
#include "device/kv_regions.h"

namespace granary::device {
namespace {

std::string Addr(const void* p) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
}

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

class CudaKernelsImpl final : public KvKernels {
 public:
  absl::Status GatherBlocks(int device, const PagedKvLayout& layout, const void* k_cache,
                            const void* v_cache, const int32_t* block_ids, int n, void* out,
                            void* stream) override {
    internal::ScopedDevice scope;
    if (absl::Status s = scope.Enter(device); !s.ok()) return s;
    std::vector<CopyRegion> regions;
    if (absl::Status s = AppendGatherRegions(layout, k_cache, v_cache, block_ids, n, out, &regions);
        !s.ok()) {
      return s;
    }
    return RunRegions("GatherBlocksGpu", device, regions.data(), regions.size(), stream);
  }

  absl::Status ScatterBlocks(int device, const PagedKvLayout& layout, const void* in,
                             const int32_t* block_ids, int n, void* k_cache, void* v_cache,
                             void* stream) override {
    internal::ScopedDevice scope;
    if (absl::Status s = scope.Enter(device); !s.ok()) return s;
    std::vector<CopyRegion> regions;
    if (absl::Status s = AppendScatterRegions(layout, in, block_ids, n, k_cache, v_cache, &regions);
        !s.ok()) {
      return s;
    }
    return RunRegions("ScatterBlocksGpu", device, regions.data(), regions.size(), stream);
  }

  absl::Status BatchCopy(int device, const CopyRegion* regions, int n, void* stream) override {
    internal::ScopedDevice scope;
    if (absl::Status s = scope.Enter(device); !s.ok()) return s;
    if (absl::Status s = internal::ValidateRegions(regions, n); !s.ok()) return s;
    return RunRegions("BatchCopyGpu", device, regions, static_cast<size_t>(n), stream);
  }

  absl::Status BatchChecksum(int device, const ChecksumRegion* regions, int n, uint64_t* out,
                             void* stream) override;

  absl::Status CompareExchange64(int device, const CasOp64* ops, int n) override;
};

absl::Status CudaKernelsImpl::BatchChecksum(int device, const ChecksumRegion* regions, int n,
                                            uint64_t* out, void* stream) {
  if (n > 0 && out != nullptr && internal::ClassifyWithDriver(out).kind == MemoryKind::kDevice) {
    return absl::InvalidArgumentError(absl::StrCat("BatchChecksum: out ", Addr(out),
                                                   " is device memory; it must be host memory"));
  }
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

absl::Status CudaKernelsImpl::CompareExchange64(int device, const CasOp64* ops, int n) {
  constexpr const char* kOp = "CompareExchange64";
  if (n < 0 || (n > 0 && ops == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", n, " ops"));
  }
  for (int i = 0; i < n; ++i) {
    const PointerInfo info = internal::ClassifyWithDriver(ops[i].p);
    if (reinterpret_cast<uintptr_t>(ops[i].p) % 8 != 0 ||
        (info.kind != MemoryKind::kDevice && info.kind != MemoryKind::kManaged)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": ops[", i, "].p ", reinterpret_cast<uintptr_t>(ops[i].p),
                       " is not 8-byte aligned device memory (", MemoryKindName(info.kind), ")"));
    }
  }
  if (n == 0) return absl::OkStatus();
  internal::ScopedDevice scope;
  if (absl::Status s = scope.Enter(device); !s.ok()) return s;
  // A non-blocking stream of its own, then a wait: a free is rare next to reads, and the caller
  // needs the header gone before it goes on. Not the legacy default stream, which would wait
  // for an engine's work on the device's blocking streams and make that work wait.
  cudaStream_t stream = nullptr;
  if (absl::Status s =
          internal::CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                               absl::StrCat("CompareExchange64: a stream on device ", device));
      !s.ok()) {
    return s;
  }
  absl::Status st =
      internal::CudaStatus(internal::LaunchCompareExchange64(ops, n, stream), "CompareExchange64");
  if (st.ok()) {
    st = internal::CudaStatus(cudaStreamSynchronize(stream),
                              "CompareExchange64: cudaStreamSynchronize");
  }
  cudaStreamDestroy(stream);
  return st;
}

}  // namespace

namespace internal {

KvKernels& CudaKernels() {
  // Leaked on purpose: kernels may be launched while other statics are destroyed.
  static KvKernels* const kernels = new CudaKernelsImpl();
  return *kernels;
}

}  // namespace internal
}  // namespace granary::device
