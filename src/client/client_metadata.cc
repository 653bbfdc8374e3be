// The Client's metadata calls: existence, removal, prefix lookup, listing, Stat, segments and
// buffer registration. Part of ClientImpl (client_impl.h); the data path is client_impl.cc
// (puts), client_get.cc (gets) and the TransferRouter (transfer_router.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/device_check.h"
#include "common/quote.h"
#include "common/status_macros.h"

namespace granary::client {

absl::StatusOr<PrefixLookup> ClientImpl::LookupPrefix(absl::string_view model,
                                                      absl::string_view hash_scheme,
                                                      const std::optional<std::string>& adapter_id,
                                                      absl::Span<const std::string> prefix_hashes,
                                                      bool lease) {
  proto::LookupPrefixRequest req;
  req.lease = lease;
  for (const auto& h : prefix_hashes) {
    KvKey k{std::string(model), std::string(hash_scheme), adapter_id, h};
    GRANARY_RETURN_IF_ERROR(ValidateKvKey(k));
    req.keys.push_back(EncodeKvKey(k));
  }
  GRANARY_ASSIGN_OR_RETURN(auto rep, (Call<proto::LookupPrefixRequest, proto::LookupPrefixReply>(
                                         proto::MsgType::kLookupPrefix, req)));
  PrefixLookup out;
  out.present = rep.present;
  out.lease_ms = rep.lease_ms;
  for (size_t i = 0; i < rep.hints.size() && i < req.keys.size(); ++i) {
    out.blocks.push_back({req.keys[i], rep.hints[i].size, rep.hints[i].node_address});
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Metadata

std::vector<absl::StatusOr<bool>> ClientImpl::BatchExist(absl::Span<const std::string> keys) {
  auto rep = Call<proto::KeysRequest, proto::BatchStatusReply>(
      proto::MsgType::kExist, proto::KeysRequest{{keys.begin(), keys.end()}});
  std::vector<absl::StatusOr<bool>> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!rep.ok()) {
      out.emplace_back(rep.status());
      continue;
    }
    absl::Status st = i < rep->results.size() ? rep->results[i].ToStatus()
                                              : absl::InternalError("short Exist reply");
    if (st.ok())
      out.emplace_back(true);
    else if (absl::IsNotFound(st))
      out.emplace_back(false);
    else
      out.emplace_back(st);
  }
  return out;
}

absl::StatusOr<bool> ClientImpl::Exist(absl::string_view key) {
  return BatchExist({std::string(key)})[0];
}

std::vector<absl::Status> ClientImpl::BatchRemove(absl::Span<const std::string> keys, bool force) {
  auto rep = Call<proto::RemoveRequest, proto::BatchStatusReply>(
      proto::MsgType::kRemove, proto::RemoveRequest{{keys.begin(), keys.end()}, force});
  std::vector<absl::Status> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!rep.ok())
      out.push_back(rep.status());
    else if (i < rep->results.size())
      out.push_back(rep->results[i].ToStatus());
    else
      out.push_back(absl::InternalError("short Remove reply"));
  }
  return out;
}

absl::Status ClientImpl::Remove(absl::string_view key, bool force) {
  return BatchRemove({std::string(key)}, force)[0];
}

absl::Status ClientImpl::RegisterBuffer(void* data, size_t size) {
  // Classified before UCX maps anything: device memory is recorded, never given to UCX (no CUDA
  // support in it here); its transfers take the device paths (client/device_transfers.h).
  GRANARY_ASSIGN_OR_RETURN(const int device, BufferDevice(data, size));
  if (device < 0) return registrations_->Register(data, size);
  if (size == 0) return absl::InvalidArgumentError("RegisterBuffer: size 0");
  granary::common::MutexLock lock(&device_regs_mu_);
  if (!device_regs_.emplace(reinterpret_cast<uintptr_t>(data), size).second) {
    return absl::AlreadyExistsError(absl::StrCat("a device buffer starting at 0x",
                                                 absl::Hex(reinterpret_cast<uintptr_t>(data)),
                                                 " is registered already"));
  }
  return absl::OkStatus();
}

absl::Status ClientImpl::UnregisterBuffer(void* data) {
  {
    granary::common::MutexLock lock(&device_regs_mu_);
    if (device_regs_.erase(reinterpret_cast<uintptr_t>(data)) > 0) return absl::OkStatus();
  }
  return registrations_->Unregister(data);
}

namespace {

ObjectInfo ToObjectInfo(proto::ObjectInfo&& o) {
  ObjectInfo info;
  info.key = std::move(o.key);
  info.size = o.size;
  info.generation = o.generation;
  info.complete = o.state == proto::ObjectState::kComplete;
  info.replicas = o.replica_count;
  info.age_ms = o.age_ms;
  return info;
}

}  // namespace

absl::StatusOr<proto::ListReply> ClientImpl::ListRaw(absl::string_view prefix, size_t limit,
                                                     absl::string_view start_after) {
  proto::ListRequest req;
  req.prefix = std::string(prefix);
  req.start_after = std::string(start_after);
  req.limit = static_cast<uint32_t>(std::min<size_t>(limit, proto::kMaxListLimit));
  return Call<proto::ListRequest, proto::ListReply>(proto::MsgType::kList, req);
}

absl::StatusOr<ListResult> ClientImpl::List(absl::string_view prefix, size_t limit,
                                            absl::string_view start_after) {
  GRANARY_ASSIGN_OR_RETURN(proto::ListReply rep, ListRaw(prefix, limit, start_after));
  ListResult out;
  out.more = rep.more;
  out.objects.reserve(rep.objects.size());
  for (auto& o : rep.objects) out.objects.push_back(ToObjectInfo(std::move(o)));
  return out;
}

absl::StatusOr<ObjectInfo> ClientImpl::Stat(absl::string_view key) {
  // The key itself sorts first among the keys it prefixes.
  GRANARY_ASSIGN_OR_RETURN(proto::ListReply rep, ListRaw(key, 1, ""));
  if (rep.objects.empty() || rep.objects[0].key != key) {
    return absl::NotFoundError(absl::StrCat("key ", common::QuotedKey(key), " not found"));
  }
  const std::vector<proto::ReplicaDesc> replicas = std::move(rep.objects[0].replicas);
  ObjectInfo info = ToObjectInfo(std::move(rep.objects[0]));
  if (info.complete) {
    // The segment descriptors are cached by id; a segment unmounted since the List is skipped.
    for (const proto::ReplicaDesc& r : replicas) {
      auto seg = session_->SegmentFor(r.segment_id);
      if (!seg.ok()) continue;
      info.replica_addresses.push_back((*seg)->node_address);
      info.replica_tiers.push_back((*seg)->gpu ? "gpu" : (*seg)->disk ? "disk" : "host");
    }
  }
  return info;
}

absl::StatusOr<std::vector<SegmentInfo>> ClientImpl::Segments() {
  GRANARY_ASSIGN_OR_RETURN(auto rep, (Call<proto::SegmentsRequest, proto::SegmentsReply>(
                                         proto::MsgType::kSegments, proto::SegmentsRequest{})));
  std::vector<SegmentInfo> out;
  for (const auto& s : rep.segments) {
    SegmentInfo i;
    i.segment_id = s.segment_id;
    i.name = s.name;
    i.node_id = s.node_id;
    i.node_address = s.node_address;
    i.tier = s.tier == proto::Tier::kGpu ? "gpu" : s.tier == proto::Tier::kDisk ? "disk" : "host";
    i.pool = s.pool;
    i.size = s.size;
    i.used = s.used;
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace granary::client
