#include "node/disk/disk_store.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/checksum.h"

namespace granary::node {

namespace {

// The preamble a reader assumes before it has seen one: one block, which holds every tenant
// and key of up to 4,032 bytes together.
constexpr uint64_t kGuessPreamble = kDiskBlock;

}  // namespace

void DiskStore::Put(absl::Span<PutOp> ops, std::vector<absl::Status>* statuses) {
  statuses->assign(ops.size(), absl::OkStatus());
  std::vector<AlignedBuffer> staging(ops.size());
  std::vector<DiskFile::Io> ios;
  std::vector<size_t> which;
  for (size_t i = 0; i < ops.size(); ++i) {
    PutOp& op = ops[i];
    op.meta.value_length = op.value.size();
    op.meta.value_checksum = device::ChecksumCpu(op.value.data(), op.value.size());
    const uint64_t preamble = DiskPreambleBytes(op.meta.tenant.size(), op.meta.key.size());
    const uint64_t bytes = preamble + DiskBlocks(op.value.size());
    staging[i] = NewAlignedBuffer(bytes);
    unsigned char* p = staging[i].get();
    if (absl::Status s = EncodeDiskPreamble(op.meta, absl::MakeSpan(p, preamble)); !s.ok()) {
      (*statuses)[i] = s;
      continue;
    }
    if (!op.value.empty()) std::memcpy(p + preamble, op.value.data(), op.value.size());
    std::memset(p + preamble + op.value.size(), 0, bytes - preamble - op.value.size());
    ios.push_back({op.offset, p, bytes});
    which.push_back(i);
  }
  if (ios.empty()) return;
  if (absl::Status s = file_->Write(ios); !s.ok()) {
    for (size_t i : which) (*statuses)[i] = s;
  }
}

void DiskStore::Get(absl::Span<const GetOp> ops, std::vector<absl::Status>* statuses) {
  statuses->assign(ops.size(), absl::OkStatus());
  std::vector<AlignedBuffer> staging(ops.size());
  std::vector<uint64_t> preamble(ops.size(), kGuessPreamble);
  // Two rounds at most: the second rereads the records whose preamble passed one block.
  std::vector<size_t> pending(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) pending[i] = i;
  for (int round = 0; round < 2 && !pending.empty(); ++round) {
    std::vector<DiskFile::Io> ios;
    for (size_t i : pending) {
      const uint64_t bytes = preamble[i] + DiskBlocks(ops[i].out.size());
      staging[i] = NewAlignedBuffer(bytes);
      ios.push_back({ops[i].offset, staging[i].get(), bytes});
    }
    if (absl::Status s = file_->Read(ios); !s.ok()) {
      for (size_t i : pending) (*statuses)[i] = s;
      return;
    }
    std::vector<size_t> again;
    for (size_t i : pending) {
      const GetOp& op = ops[i];
      const unsigned char* p = staging[i].get();
      const uint64_t need = PeekDiskPreambleBytes(absl::MakeConstSpan(p, kDiskBlock));
      if (need > preamble[i] && round == 0) {
        preamble[i] = need;
        again.push_back(i);
        continue;
      }
      absl::StatusOr<DiskRecordMeta> meta = DecodeDiskPreamble(absl::MakeConstSpan(p, preamble[i]));
      if (!meta.ok()) {
        checksum_failures_.fetch_add(1, std::memory_order_relaxed);
        (*statuses)[i] = absl::DataLossError(absl::StrCat(
            "disk tier ", file_->file(), " offset ", op.offset, ": ", meta.status().message()));
        continue;
      }
      if ((op.generation != 0 &&
           (meta->generation != op.generation || meta->key_hash != op.key_hash)) ||
          meta->value_length != op.out.size()) {
        (*statuses)[i] = absl::UnavailableError(absl::StrCat(
            "disk replica at offset ", op.offset, " holds generation ", meta->generation,
            ", length ", meta->value_length, " (expected generation ", op.generation, ", length ",
            op.out.size(), "): the object changed during the read; retry"));
        continue;
      }
      const absl::Span<const unsigned char> value(p + preamble[i], op.out.size());
      if (absl::Status s = CheckDiskValue(*meta, value); !s.ok()) {
        checksum_failures_.fetch_add(1, std::memory_order_relaxed);
        (*statuses)[i] = absl::DataLossError(
            absl::StrCat("disk tier ", file_->file(), " offset ", op.offset, ": ", s.message()));
        continue;
      }
      if (!value.empty()) std::memcpy(op.out.data(), value.data(), value.size());
      if (op.found != nullptr) *op.found = *std::move(meta);
    }
    pending = std::move(again);
  }
}

void DiskStore::PeekMany(absl::Span<const uint64_t> offsets,
                         std::vector<absl::StatusOr<DiskRecordMeta>>* out) {
  out->assign(offsets.size(), absl::StatusOr<DiskRecordMeta>(absl::UnknownError("not read")));
  std::vector<AlignedBuffer> blocks(offsets.size());
  std::vector<uint64_t> bytes(offsets.size(), kDiskBlock);
  std::vector<size_t> pending(offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) pending[i] = i;
  // Two rounds at most: the second rereads the preambles longer than one block.
  for (int round = 0; round < 2 && !pending.empty(); ++round) {
    std::vector<DiskFile::Io> ios;
    for (size_t i : pending) {
      blocks[i] = NewAlignedBuffer(bytes[i]);
      ios.push_back({offsets[i], blocks[i].get(), bytes[i]});
    }
    if (absl::Status s = file_->Read(ios); !s.ok()) {
      for (size_t i : pending) (*out)[i] = s;
      return;
    }
    std::vector<size_t> again;
    for (size_t i : pending) {
      const uint64_t need = PeekDiskPreambleBytes(absl::MakeConstSpan(blocks[i].get(), kDiskBlock));
      if (round == 0 && need > kDiskBlock) {
        bytes[i] = need;
        again.push_back(i);
        continue;
      }
      (*out)[i] = DecodeDiskPreamble(absl::MakeConstSpan(blocks[i].get(), bytes[i]));
    }
    pending = std::move(again);
  }
}

absl::StatusOr<DiskRecordMeta> DiskStore::Peek(uint64_t offset) {
  std::vector<absl::StatusOr<DiskRecordMeta>> out;
  PeekMany({offset}, &out);
  return std::move(out[0]);
}

}  // namespace granary::node
