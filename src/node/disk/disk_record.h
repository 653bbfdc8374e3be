#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/disk_layout.h"

namespace granary::node {

// How one object lies on a disk tier, at a kDiskBlock-aligned offset the master allocated:
//
//   preamble  the 64-byte DiskRecordHeader, then the tenant id and the key (their bytes, no
//             terminator), zero-padded to a whole number of blocks (one block unless tenant
//             and key pass 4,032 bytes);
//   value     value_length bytes, zero-padded to a whole block.
//
// So the value starts block-aligned and reads straight into an aligned buffer, and a restarted
// node learns from the preamble alone whose object this is (the tenant and key themselves, not
// only hashes: a master that restarted while the node was down knows neither).
//
// Checks: the header's checksum covers the whole preamble (with the checksum field zero), and
// value_checksum covers the value's value_length bytes, both device::ChecksumCpu (the checksum
// a GPU computes too, so a GPU replica can be checked where it is). A record whose preamble or
// value fails its check is never served: DecodeDiskPreamble and CheckDiskValue answer
// DATA_LOSS, naming what failed. Little-endian, as the node's memory headers are.
struct DiskRecordHeader {
  static constexpr uint64_t kMagic = 0x314B534459524E47ULL;  // "GNRYDSK1"
  uint64_t magic = kMagic;
  uint64_t generation = 0;
  uint64_t tenant_hash = 0;
  uint64_t key_hash = 0;
  uint64_t value_length = 0;
  uint64_t value_checksum = 0;
  uint32_t tenant_bytes = 0;
  uint32_t key_bytes = 0;
  uint64_t header_checksum = 0;
};
static_assert(sizeof(DiskRecordHeader) == 64);

// What a record says about its object.
struct DiskRecordMeta {
  std::string tenant;
  std::string key;
  uint64_t generation = 0;
  uint64_t key_hash = 0;  // the hash the master and the memory headers use for this key
  uint64_t value_length = 0;
  uint64_t value_checksum = 0;
};

// The preamble's and the record's bytes (proto/disk_layout.h, which the master sizes
// allocations with).
using proto::DiskPreambleBytes;
using proto::DiskRecordBytes;
static_assert(sizeof(DiskRecordHeader) == proto::kDiskRecordHeaderBytes);

// Writes the preamble for `meta` into out (DiskPreambleBytes long, zeroed past the key).
// INVALID_ARGUMENT when the tenant or key is over the wire limits or out is the wrong size.
[[nodiscard]] absl::Status EncodeDiskPreamble(const DiskRecordMeta& meta,
                                              absl::Span<unsigned char> out);
// Reads the preamble at the start of `in` (which holds at least the whole preamble: one block,
// or PeekDiskPreambleBytes of the first block when tenant and key pass one). DATA_LOSS when the
// magic, the sizes or the header checksum are wrong; OUT_OF_RANGE, naming the bytes needed,
// when `in` is shorter than the preamble the header announces.
[[nodiscard]] absl::StatusOr<DiskRecordMeta> DecodeDiskPreamble(absl::Span<const unsigned char> in);
// The preamble's length as the header in the first block says, without checking the checksum
// (for a reader that fetched only one block). 0 when the first block is no record header.
uint64_t PeekDiskPreambleBytes(absl::Span<const unsigned char> first_block);
// DATA_LOSS unless value's checksum is meta.value_checksum (and its size meta.value_length).
[[nodiscard]] absl::Status CheckDiskValue(const DiskRecordMeta& meta,
                                          absl::Span<const unsigned char> value);

}  // namespace granary::node
