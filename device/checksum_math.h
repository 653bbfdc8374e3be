#pragma once

// The checksum of device/checksum.h, the part the CPU reference and the GPU kernel (kernels.cu)
// share: the region type and the per-word arithmetic. Free of absl and host-only headers so that
// nvcc compiles it; everything is inline and usable on both sides.

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define GRANARY_HOST_DEVICE __host__ __device__
#else
#define GRANARY_HOST_DEVICE
#endif

namespace granary::device {

// One region of a batched checksum: `bytes` bytes at `data`. A plain value.
struct ChecksumRegion {
  const void* data = nullptr;
  size_t bytes = 0;
};

// The golden-ratio increment of splitmix64: word i is offset by i * kChecksumWordStep before it
// is mixed, so equal words at different positions give different terms.
inline constexpr uint64_t kChecksumWordStep = 0x9E3779B97F4A7C15ull;

// The splitmix64 finalizer (Steele, Lea and Flood 2014): a bijection of 64-bit words.
GRANARY_HOST_DEVICE inline uint64_t ChecksumMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The term word i (8 bytes read little-endian, the last one zero-padded) adds to the sum.
GRANARY_HOST_DEVICE inline uint64_t ChecksumTerm(uint64_t word, uint64_t i) {
  return ChecksumMix(word + i * kChecksumWordStep);
}

// The checksum of `bytes` bytes whose terms add up to `sum` (mod 2^64): the length is mixed in,
// so that trailing zero bytes change it.
GRANARY_HOST_DEVICE inline uint64_t ChecksumFinish(uint64_t sum, uint64_t bytes) {
  return ChecksumMix(sum ^ ChecksumMix(bytes + kChecksumWordStep));
}

}  // namespace granary::device
