// ClientImpl's reads (client_impl.h): the Get forms, one round of reads at a time (the master's
// Get, then TransferRouter's paths, then the header checks), the read leases given back, and
// ReadReplica. Puts and the rest of the client are client_impl.cc.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/device_check.h"
#include "common/log.h"
#include "common/quote.h"
#include "common/status_macros.h"
#include "common/util.h"

namespace granary::client {

using proto::AllocHeader;
using proto::kAllocHeaderSize;

std::vector<absl::StatusOr<size_t>> ClientImpl::GetImpl(absl::Span<const std::string> keys,
                                                        const DestFn& dest,
                                                        const GetOptions& options,
                                                        const std::vector<int>* devices) {
  common::ScopedLogRoute route(&log_route_);
  const size_t n = keys.size();
  std::vector<absl::StatusOr<size_t>> out(n, absl::UnknownError("not attempted"));
  if (n > proto::kMaxBatch) {
    out.assign(n, absl::InvalidArgumentError(
                      absl::StrCat("batch of ", n, " keys exceeds the limit ", proto::kMaxBatch)));
    return out;
  }
  if (options.lease_ms > GetOptions::kMaxLeaseMs) {
    out.assign(n, absl::InvalidArgumentError(absl::StrCat("GetOptions::lease_ms ", options.lease_ms,
                                                          " exceeds the limit ",
                                                          GetOptions::kMaxLeaseMs, " ms")));
    return out;
  }
  const std::optional<bool> prefer_gpu = PreferGpu(options.tier);
  std::vector<size_t> pending(n);
  for (size_t i = 0; i < n; ++i) pending[i] = i;
  std::vector<AllocHeader> headers(n);
  for (int attempt = 0; attempt <= options_.get_retries && !pending.empty(); ++attempt) {
    proto::GetRequest req;
    req.lease_ms = options.lease_ms;
    for (size_t i : pending) req.keys.push_back(keys[i]);
    auto rep = Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet, req);
    if (!rep.ok() || rep->results.size() != pending.size()) {
      absl::Status st =
          rep.ok() ? absl::InternalError("Get reply has the wrong size") : rep.status();
      for (size_t i : pending) out[i] = st;
      return out;
    }
    TransferRouter::Batch batch(router_.get());  // its pins last until the round is done
    GetPlan plan;
    router_->PlanGet(&batch, attempt, keys, pending, *rep, dest, &headers, &out, &plan, devices,
                     prefer_gpu);
    RunGetRound(keys, &plan, &headers, &out, &pending);
  }
  return out;
}

void ClientImpl::RunGetRound(absl::Span<const std::string> keys, GetPlan* plan,
                             std::vector<AllocHeader>* headers,
                             std::vector<absl::StatusOr<size_t>>* out,
                             std::vector<size_t>* pending) {
  // Each key's transfer status, then the leases go back and the headers are checked.
  std::vector<absl::Status> failed = router_->RunGet(plan, keys.size(), headers);
  ReleaseLeasesAsync(plan->release);
  pending->clear();
  for (size_t i : plan->fetched) {
    if (!failed[i].ok()) {
      // Retried (another replica, or the same one alone), UNAVAILABLE unless the bytes were
      // found corrupt (a disk record that failed its checksum: DATA_LOSS).
      (*out)[i] = absl::Status(absl::IsDataLoss(failed[i]) ? absl::StatusCode::kDataLoss
                                                           : absl::StatusCode::kUnavailable,
                               absl::StrCat("reading key ", common::QuotedKey(keys[i]),
                                            " failed: ", failed[i].message()));
      pending->push_back(i);
      continue;
    }
    absl::Status hs = proto::CheckAllocHeader((*headers)[i], plan->gens[i],
                                              common::HashBytes(keys[i]), plan->lens[i]);
    if (!hs.ok()) {
      (*out)[i] = hs;
      pending->push_back(i);
      continue;
    }
    (*out)[i] = plan->lens[i];
  }
}

void ClientImpl::ReleaseLeasesAsync(const proto::KeyGenRequest& leases) {
  if (leases.entries.empty()) return;
  {
    // Sent from this thread when it can be, rather than by waking the progress thread.
    transport::Worker::DriveIntent intent(worker_.get());
    session_->Send(proto::MsgType::kGetEnd, leases);  // no session: its leases are gone with it
  }
  worker_->SendNow();
}

absl::StatusOr<std::string> ClientImpl::ReadReplica(const std::string& key, uint64_t generation,
                                                    uint64_t size,
                                                    const proto::ReplicaDesc& replica) {
  common::ScopedLogRoute route(&log_route_);
  GRANARY_ASSIGN_OR_RETURN(auto seg, session_->SegmentFor(replica.segment_id));
  AllocHeader header;
  std::string value(size, '\0');
  transport::RmaOp hdr;
  hdr.local = &header;
  hdr.length = kAllocHeaderSize;
  hdr.remote_addr = replica.address;
  hdr.segment = std::move(seg);
  hdr.header = true;
  transport::RmaOp body = hdr;
  body.header = false;
  body.local = value.data();
  body.length = size;
  body.remote_addr = replica.address + kAllocHeaderSize;
  GRANARY_RETURN_IF_ERROR(router_->Transfer({hdr, body}));
  GRANARY_RETURN_IF_ERROR(
      proto::CheckAllocHeader(header, generation, common::HashBytes(key), size));
  return value;
}

absl::StatusOr<std::string> ClientImpl::Get(absl::string_view key) {
  const std::string k(key);
  return std::move(BatchGet(absl::MakeConstSpan(&k, 1), GetOptions{})[0]);
}

std::vector<absl::StatusOr<std::string>> ClientImpl::BatchGet(absl::Span<const std::string> keys,
                                                              const GetOptions& options) {
  std::vector<std::string> values(keys.size());
  auto sizes = GetImpl(
      keys,
      [&](size_t i, uint64_t size) -> absl::StatusOr<void*> {
        values[i].resize(size);
        return values[i].data();
      },
      options);
  std::vector<absl::StatusOr<std::string>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (sizes[i].ok()) {
      out.emplace_back(std::move(values[i]));
    } else {
      out.emplace_back(sizes[i].status());
    }
  }
  return out;
}

std::vector<absl::StatusOr<size_t>> ClientImpl::BatchGetInto(absl::Span<const std::string> keys,
                                                             absl::Span<void* const> buffers,
                                                             absl::Span<const size_t> capacities,
                                                             const GetOptions& options) {
  if (buffers.size() != keys.size() || capacities.size() != keys.size()) {
    return std::vector<absl::StatusOr<size_t>>(
        keys.size(), absl::InvalidArgumentError("keys, buffers and capacities differ in length"));
  }
  auto run = [this, &options](absl::Span<const std::string> k, absl::Span<void* const> b,
                              absl::Span<const size_t> cap, const std::vector<int>* devices) {
    return GetImpl(
        k,
        [&](size_t i, uint64_t size) -> absl::StatusOr<void*> {
          if (size > cap[i]) {
            return absl::FailedPreconditionError(
                absl::StrCat("key ", common::QuotedKey(k[i]), " holds ", size,
                             " bytes but the buffer has ", cap[i]));
          }
          return b[i];
        },
        options, devices);
  };
  return WithBufferDevices<absl::StatusOr<size_t>>(keys, buffers, capacities, run);
}

}  // namespace granary::client
