#pragma once

// CopyRegion on its own, free of absl, so that kernels.cu (compiled by nvcc) shares the exact
// type the host code builds.

#include <cstddef>

namespace granary::device {

// One region of a batched copy: `bytes` bytes from `src` to `dst`. A plain value.
struct CopyRegion {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};

}  // namespace granary::device
