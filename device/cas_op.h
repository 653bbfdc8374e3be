#pragma once

// One compare-and-swap of KvKernels::CompareExchange64. Free of absl and CUDA, so that the
// kernel (cas_kernel.cu) and CUDA-free callers share it.

#include <cstdint>

namespace granary::device {

// *p (8-byte aligned device memory) becomes `desired` only while it holds `expected`.
struct CasOp64 {
  void* p = nullptr;
  uint64_t expected = 0;
  uint64_t desired = 0;
};

}  // namespace granary::device
