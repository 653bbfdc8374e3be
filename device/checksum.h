#pragma once

// A 64-bit checksum of a byte string, built for a GPU: every 8-byte word contributes one term
// that depends only on the word and its position, and the terms are added, so any split of the
// words over threads and blocks (tree or atomic reduction) gives the same result.
//
//   words  w_i, i in [0, ceil(n / 8)): bytes [8i, 8i + 8) read little-endian, the last word
//          zero-padded;
//   sum    S = sum over i of Mix(w_i + i * 0x9E3779B97F4A7C15)  (mod 2^64);
//   result Mix(S ^ Mix(n + 0x9E3779B97F4A7C15)),
//
// where Mix is the splitmix64 finalizer (checksum_math.h). Because Mix is a bijection, a change
// confined to one word (any number of flipped bits in it) always changes the result; swapping two
// different words changes it unless the two terms' sum happens to stay the same (chance about
// 2^-64); the length is mixed in, so appended zero bytes change it. Not cryptographic: it finds
// corruption, not tampering.
//
// The CPU reference here is the oracle: the cuda backend's kernel (KvKernels::BatchChecksum)
// and the fake's must give the same values. Cost on the CPU: per 8-byte word one unaligned load,
// three multiplies and a few shifts and xors, no allocation (measured by the unit test's
// throughput line; a few GB/s per core).
//
// Thread safety: all functions are reentrant.

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "device/checksum_math.h"  // ChecksumRegion

namespace granary::device {

// The checksum of [data, data + bytes); data may be null when bytes == 0.
uint64_t ChecksumCpu(const void* data, size_t bytes);

// Checks a BatchChecksum argument list: n >= 0, `regions` and `out` non-null when n > 0, and a
// non-null data pointer in every region with bytes > 0. INVALID_ARGUMENT names the bad value
// (and the region's index).
[[nodiscard]] absl::Status ValidateChecksumRegions(const ChecksumRegion* regions, int n,
                                                   const uint64_t* out);

// out[i] = ChecksumCpu(regions[i]) for i in [0, n), after ValidateChecksumRegions.
[[nodiscard]] absl::Status BatchChecksumCpu(const ChecksumRegion* regions, int n, uint64_t* out);

}  // namespace granary::device
