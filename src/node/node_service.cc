#include "node/node_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/range.h"
#include "common/status_macros.h"
#include "node/disk/disk_record.h"
#include "proto/alloc_header.h"

namespace granary::node {

NodeService::NodeService(std::vector<SegmentSpan> segments)
    : segments_(std::move(segments)), master_ids_(segments_.size(), 0) {
  for (size_t i = 0; i < segments_.size(); ++i) {
    const SegmentSpan& s = segments_[i];
    GRANARY_CHECK(s.size <= ~uint64_t{0} - s.base) << s.name << " wraps around";
    for (size_t j = 0; j < i; ++j) {
      const SegmentSpan& t = segments_[j];
      GRANARY_CHECK(s.base >= t.base + t.size || t.base >= s.base + s.size)
          << s.name << " overlaps " << t.name;
    }
  }
}

void NodeService::BeginSession() {
  granary::common::MutexLock lock(&mu_);
  for (uint64_t& id : master_ids_) id = 0;
}

proto::MountSegmentRequest NodeService::MountRequest(size_t index, const MountIdentity& who,
                                                     bool resumed) const {
  GRANARY_CHECK(index < segments_.size()) << index;
  const SegmentSpan& s = segments_[index];
  proto::MountSegmentRequest m;
  m.name = s.name;
  m.node_id = who.node_id;
  m.node_address = who.node_address;
  m.base = s.base;
  m.size = s.size;
  m.tier = s.tier;
  m.rkey = s.rkey;
  m.pool = who.pool;
  m.worker_address = who.worker_address;
  m.host_id = who.host_id;
  m.resumed = resumed;
  m.gpu_ipc = s.gpu_ipc;
  m.gpu_uuid = s.gpu_uuid;
  m.nic = s.nic;
  m.numa_node = s.numa_node;
  m.gpu = s.gpu;
  return m;
}

std::optional<size_t> NodeService::IndexOf(uint64_t segment_id) const {
  if (segment_id == 0) return std::nullopt;
  granary::common::MutexLock lock(&mu_);
  for (size_t i = 0; i < master_ids_.size(); ++i) {
    if (master_ids_[i] == segment_id) return i;
  }
  return std::nullopt;
}

std::vector<uint64_t> NodeService::MountedIds() const {
  granary::common::MutexLock lock(&mu_);
  return master_ids_;
}

void NodeService::SetMounted(size_t index, uint64_t segment_id) {
  GRANARY_CHECK(index < segments_.size()) << index;
  granary::common::MutexLock lock(&mu_);
  master_ids_[index] = segment_id;
}

uint64_t NodeService::segment_id(size_t index) const {
  GRANARY_CHECK(index < segments_.size()) << index;
  granary::common::MutexLock lock(&mu_);
  return master_ids_[index];
}

std::vector<uint64_t> NodeService::TakeMounted() {
  std::vector<uint64_t> out;
  granary::common::MutexLock lock(&mu_);
  for (uint64_t& id : master_ids_) {
    if (id != 0) out.push_back(id);
    id = 0;
  }
  return out;
}

std::optional<size_t> NodeService::SegmentHolding(uint64_t address, uint64_t length) const {
  for (size_t i = 0; i < segments_.size(); ++i) {
    const SegmentSpan& s = segments_[i];
    if (length > 0 && common::RangeWithin(s.base, s.size, address, length)) {
      return i;
    }
  }
  return std::nullopt;
}

namespace {

absl::Status CheckTransferTimeout(const char* what, uint32_t timeout_ms) {
  if (timeout_ms >= 1 && timeout_ms <= proto::kMaxNodeTransferTimeoutMs) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " timeout_ms ", timeout_ms, " is not in 1..",
                                                 proto::kMaxNodeTransferTimeoutMs));
}

}  // namespace

absl::Status NodeService::CheckFetch(const proto::FetchRequest& req) const {
  std::optional<size_t> dest = SegmentHolding(req.dest_address, req.length);
  if (!dest.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("fetch of ", req.length, " bytes to address ",
                                                   req.dest_address,
                                                   " is outside this node's segments"));
  }
  if (req.source.worker_address.empty() || req.source.rkey.empty()) {
    return absl::InvalidArgumentError("fetch without a source worker address and rkey");
  }
  if (segments_[*dest].tier == proto::Tier::kDisk) {
    return absl::FailedPreconditionError(
        absl::StrCat("fetch to address ", req.dest_address, " is in disk tier '",
                     segments_[*dest].name, "', which takes writes in Write messages only"));
  }
  return CheckTransferTimeout("fetch", req.timeout_ms);
}

absl::Status NodeService::CheckPush(const proto::PushRequest& req,
                                    std::vector<size_t>* sources) const {
  sources->clear();
  const proto::SegmentInfo& dest = req.dest;
  if (dest.worker_address.empty() || dest.rkey.empty() || dest.node_address.empty()) {
    return absl::InvalidArgumentError("push without the client's worker address, rkey and id");
  }
  GRANARY_RETURN_IF_ERROR(CheckTransferTimeout("push", req.timeout_ms));
  sources->reserve(req.entries.size());
  for (const auto& e : req.entries) {
    std::optional<size_t> src = SegmentHolding(e.source_address, e.length);
    if (!src.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("push of ", e.length, " bytes from address ",
                                                     e.source_address,
                                                     " is outside this node's segments"));
    }
    if (segments_[*src].tier == proto::Tier::kDisk) {
      return absl::FailedPreconditionError(absl::StrCat("push from address ", e.source_address,
                                                        " is in disk tier '", segments_[*src].name,
                                                        "', which is read in Read messages only"));
    }
    if (!common::RangeWithin(dest.base, dest.size, e.dest_address, e.length)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push of ", e.length, " bytes to address ", e.dest_address,
          " is outside the client's buffer at ", dest.base, " of ", dest.size, " bytes"));
    }
    sources->push_back(*src);
  }
  for (uint64_t h : req.headers) {
    std::optional<size_t> in = SegmentHolding(h, proto::kAllocHeaderSize);
    if (!in.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("header at address ", h, " is outside this node's segments"));
    }
    if (segments_[*in].tier == proto::Tier::kDisk) {
      return absl::FailedPreconditionError(
          absl::StrCat("push of the header at address ", h, " in disk tier '", segments_[*in].name,
                       "': a disk tier is read in Read messages only"));
    }
  }
  return absl::OkStatus();
}

bool NodeService::DiskAt(uint64_t address) const {
  std::optional<size_t> in = SegmentHolding(address, 1);
  return in.has_value() && segments_[*in].tier == proto::Tier::kDisk;
}

absl::Status NodeService::CheckInline(const char* what,
                                      const std::vector<proto::InlineEntry>& entries,
                                      std::optional<uint64_t> data_bytes) const {
  // Bounded per entry first, so the sum cannot wrap.
  uint64_t total = 0;
  for (const auto& e : entries) {
    if (e.length > proto::kMaxFrameBody) {
      return absl::InvalidArgumentError(absl::StrCat(what, " of ", e.length, " bytes at address ",
                                                     e.address, " exceeds the frame limit ",
                                                     proto::kMaxFrameBody));
    }
    total += proto::kAllocHeaderSize + e.length;
  }
  // A reply also carries its frame header and status: keep a margin under the frame limit.
  constexpr uint64_t kMargin = 4096;
  if (total > proto::kMaxFrameBody - kMargin) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " of ", entries.size(), " values, ", total, " bytes with their headers, exceeds ",
        proto::kMaxFrameBody - kMargin, " bytes in one message"));
  }
  if (data_bytes.has_value() && *data_bytes != total) {
    return absl::InvalidArgumentError(absl::StrCat(what, " carries ", *data_bytes,
                                                   " bytes of data, but its ", entries.size(),
                                                   " entries need ", total));
  }
  for (const auto& e : entries) {
    // A disk record is at least a block of preamble and the value in whole blocks (its exact
    // size, with the tenant and key, is checked where it is written).
    const bool disk = DiskAt(e.address);
    std::optional<size_t> in = SegmentHolding(
        e.address, disk ? DiskRecordBytes(0, 0, e.length) : proto::kAllocHeaderSize + e.length);
    if (!in.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " of ", e.length, " bytes at address ", e.address, " (with its ",
                       proto::kAllocHeaderSize, "-byte header) is outside this node's segments"));
    }
    if (segments_[*in].tier == proto::Tier::kGpu) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " at address ", e.address, " is in GPU segment '", segments_[*in].name,
          "', which this node never copies with the CPU (read it by Push, write it one-sided)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace granary::node
