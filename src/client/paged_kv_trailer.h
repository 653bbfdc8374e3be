#pragma once

// The trailer PagedKvOptions::checksum appends to a paged-KV value (include/granary/client.h):
// kKvTrailerBytes after the gathered blocks, little-endian:
//
//   u32 magic      kKvTrailerMagic, the bytes "GKVC"
//   u32 algorithm  kKvChecksumAlgorithm: 1 is device/checksum.h's function
//   u64 checksum   of the value's bytes before the trailer
//
// Plain functions on byte arrays; reentrant.

#include <cstddef>
#include <cstdint>

namespace granary::client {

inline constexpr size_t kKvTrailerBytes = 16;
inline constexpr uint32_t kKvTrailerMagic = 0x43564B47;  // "GKVC" read little-endian
inline constexpr uint32_t kKvChecksumAlgorithm = 1;

struct KvTrailer {
  uint32_t magic = 0;
  uint32_t algorithm = 0;
  uint64_t checksum = 0;
};

// Writes the trailer of a value whose blocks have `checksum` to out[0..kKvTrailerBytes).
void EncodeKvTrailer(uint64_t checksum, unsigned char* out);

// Reads in[0..kKvTrailerBytes) as a trailer (whatever the bytes are).
KvTrailer DecodeKvTrailer(const unsigned char* in);

}  // namespace granary::client
