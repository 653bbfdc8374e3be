#include "node/disk/disk_record.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/util.h"
#include "device/checksum.h"
#include "node/disk/disk_file.h"
#include "proto/wire_types.h"

namespace granary::node {

namespace {

// The checksum of a preamble, its checksum field read as zero: the header's 64 bytes (from a
// copy with the field cleared) and the tenant and key after it, combined.
uint64_t PreambleChecksum(const unsigned char* p, size_t preamble_bytes) {
  DiskRecordHeader h;
  std::memcpy(&h, p, sizeof(h));
  h.header_checksum = 0;
  const uint64_t head = device::ChecksumCpu(&h, sizeof(h));
  const uint64_t rest = device::ChecksumCpu(p + sizeof(h), preamble_bytes - sizeof(h));
  return common::HashBytes(absl::string_view(reinterpret_cast<const char*>(&rest), sizeof(rest)),
                           head);
}

}  // namespace

absl::Status EncodeDiskPreamble(const DiskRecordMeta& meta, absl::Span<unsigned char> out) {
  if (meta.tenant.size() > proto::kMaxTenantIdBytes || meta.key.size() > proto::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk record: tenant of ", meta.tenant.size(), " bytes or key of ", meta.key.size(),
        " bytes is over the limits (", proto::kMaxTenantIdBytes, ", ", proto::kMaxKeyBytes, ")"));
  }
  const uint64_t bytes = DiskPreambleBytes(meta.tenant.size(), meta.key.size());
  if (out.size() != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk record: preamble buffer of ", out.size(), " bytes, need ", bytes));
  }
  std::memset(out.data(), 0, out.size());
  DiskRecordHeader h;
  h.generation = meta.generation;
  h.tenant_hash = common::HashBytes(meta.tenant);
  h.key_hash = meta.key_hash;
  h.value_length = meta.value_length;
  h.value_checksum = meta.value_checksum;
  h.tenant_bytes = static_cast<uint32_t>(meta.tenant.size());
  h.key_bytes = static_cast<uint32_t>(meta.key.size());
  std::memcpy(out.data(), &h, sizeof(h));
  unsigned char* at = out.data() + sizeof(h);
  std::memcpy(at, meta.tenant.data(), meta.tenant.size());
  std::memcpy(at + meta.tenant.size(), meta.key.data(), meta.key.size());
  h.header_checksum = PreambleChecksum(out.data(), out.size());
  std::memcpy(out.data(), &h, sizeof(h));
  return absl::OkStatus();
}

uint64_t PeekDiskPreambleBytes(absl::Span<const unsigned char> first_block) {
  if (first_block.size() < sizeof(DiskRecordHeader)) return 0;
  DiskRecordHeader h;
  std::memcpy(&h, first_block.data(), sizeof(h));
  if (h.magic != DiskRecordHeader::kMagic || h.tenant_bytes > proto::kMaxTenantIdBytes ||
      h.key_bytes > proto::kMaxKeyBytes) {
    return 0;
  }
  return DiskPreambleBytes(h.tenant_bytes, h.key_bytes);
}

absl::StatusOr<DiskRecordMeta> DecodeDiskPreamble(absl::Span<const unsigned char> in) {
  if (in.size() < sizeof(DiskRecordHeader)) {
    return absl::OutOfRangeError(absl::StrCat(
        "disk record: ", in.size(), " bytes hold no header (need ", sizeof(DiskRecordHeader), ")"));
  }
  DiskRecordHeader h;
  std::memcpy(&h, in.data(), sizeof(h));
  if (h.magic != DiskRecordHeader::kMagic) {
    return absl::DataLossError(absl::StrCat("disk record: bad magic 0x", absl::Hex(h.magic)));
  }
  if (h.tenant_bytes > proto::kMaxTenantIdBytes || h.key_bytes > proto::kMaxKeyBytes) {
    return absl::DataLossError(absl::StrCat("disk record: tenant of ", h.tenant_bytes,
                                            " bytes or key of ", h.key_bytes,
                                            " bytes is over the limits"));
  }
  const uint64_t bytes = DiskPreambleBytes(h.tenant_bytes, h.key_bytes);
  if (in.size() < bytes) {
    return absl::OutOfRangeError(
        absl::StrCat("disk record: the preamble needs ", bytes, " bytes, have ", in.size()));
  }
  if (PreambleChecksum(in.data(), bytes) != h.header_checksum) {
    return absl::DataLossError(absl::StrCat("disk record: header checksum mismatch (generation ",
                                            h.generation, ", key hash 0x", absl::Hex(h.key_hash),
                                            ")"));
  }
  const char* at = reinterpret_cast<const char*>(in.data()) + sizeof(h);
  DiskRecordMeta meta;
  meta.tenant.assign(at, h.tenant_bytes);
  meta.key.assign(at + h.tenant_bytes, h.key_bytes);
  meta.generation = h.generation;
  meta.key_hash = h.key_hash;
  meta.value_length = h.value_length;
  meta.value_checksum = h.value_checksum;
  return meta;
}

absl::Status CheckDiskValue(const DiskRecordMeta& meta, absl::Span<const unsigned char> value) {
  if (value.size() != meta.value_length) {
    return absl::DataLossError(absl::StrCat("disk record ", meta.tenant, "/", meta.key, ": ",
                                            value.size(), " value bytes, the header says ",
                                            meta.value_length));
  }
  const uint64_t sum = device::ChecksumCpu(value.data(), value.size());
  if (sum != meta.value_checksum) {
    return absl::DataLossError(absl::StrCat("disk record ", meta.tenant, "/", meta.key,
                                            " (generation ", meta.generation,
                                            "): value checksum mismatch"));
  }
  return absl::OkStatus();
}

}  // namespace granary::node
