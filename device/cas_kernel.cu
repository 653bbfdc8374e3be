// The compare-and-swap kernel of the cuda backend's CompareExchange64: one thread per op.
// Kept free of absl and of host-only headers so that nvcc compiles it quickly.

#include "device/cas_kernel.h"
#include "device/launch_status.h"

namespace granary::device::internal {
namespace {

constexpr int kThreads = 128;

__global__ void CompareExchange64Kernel(const CasOp64* ops, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const CasOp64 op = ops[i];
  atomicCAS(static_cast<unsigned long long*>(op.p), static_cast<unsigned long long>(op.expected),
            static_cast<unsigned long long>(op.desired));
}

}  // namespace

cudaError_t LaunchCompareExchange64(const CasOp64* ops, int n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const size_t table_bytes = static_cast<size_t>(n) * sizeof(CasOp64);
  void* table = nullptr;
  cudaError_t err = cudaMallocAsync(&table, table_bytes, stream);
  if (err != cudaSuccess) return err;
  err = cudaMemcpyAsync(table, ops, table_bytes, cudaMemcpyHostToDevice, stream);
  if (err == cudaSuccess) {
    const unsigned grid = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    err = LaunchStatus(cudaGetLastError, [&] {
      CompareExchange64Kernel<<<grid, kThreads, 0, stream>>>(static_cast<const CasOp64*>(table), n);
    });
  }
  const cudaError_t free_err = cudaFreeAsync(table, stream);
  return err != cudaSuccess ? err : free_err;
}

}  // namespace granary::device::internal
