#pragma once

// The sizes of an object's record on a node's disk tier (node/disk/disk_record.h has the
// format), which the master allocates in the tier and the node writes: both compute them here.

#include <cstddef>
#include <cstdint>

namespace granary::proto {

// Offsets and lengths on a disk tier are multiples of this (O_DIRECT's unit on 4Kn devices and
// on every file system Linux has; 512-byte devices accept it too). The master aligns a disk
// tier's allocations to it.
inline constexpr uint64_t kDiskBlock = 4096;
// The fixed header at the start of a record's preamble (node::DiskRecordHeader).
inline constexpr uint64_t kDiskRecordHeaderBytes = 64;

// n rounded up to a multiple of kDiskBlock.
constexpr uint64_t DiskBlocks(uint64_t n) { return (n + kDiskBlock - 1) / kDiskBlock * kDiskBlock; }
// The preamble's bytes for a tenant and key of these sizes: the header, the tenant and the key,
// in whole blocks.
constexpr uint64_t DiskPreambleBytes(size_t tenant_bytes, size_t key_bytes) {
  return DiskBlocks(kDiskRecordHeaderBytes + tenant_bytes + key_bytes);
}
// The record's bytes on disk: preamble plus value, each in whole blocks.
constexpr uint64_t DiskRecordBytes(size_t tenant_bytes, size_t key_bytes, uint64_t value_length) {
  return DiskPreambleBytes(tenant_bytes, key_bytes) + DiskBlocks(value_length);
}

}  // namespace granary::proto
