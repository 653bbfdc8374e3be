// DataHandlers' Read and Write of entries on disk tiers (data_handlers.h): run on each tier's
// thread (DiskTier), answered from there.

#include <atomic>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "node/data_handlers.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"

namespace granary::node {

namespace {

// The disk tier of each entry, or why the request cannot be served. Every entry must be on a
// disk tier (the client's groups never mix them with memory; CheckInline checked the ranges).
absl::Status DiskTiersOf(const NodeService& service, const NodeSegments& segments,
                         const std::vector<proto::InlineEntry>& entries,
                         std::vector<size_t>* tiers) {
  tiers->clear();
  for (const auto& e : entries) {
    std::optional<size_t> in = service.SegmentHolding(e.address, 1);
    if (!in.has_value() || segments.disk(*in) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("a message names disk-tier and memory entries together (address ", e.address,
                       "): send them in separate messages"));
    }
    tiers->push_back(*in);
  }
  return absl::OkStatus();
}

// One request's disk jobs, one per tier it names; the last to finish answers.
struct Pending {
  std::atomic<size_t> left{0};
  std::vector<absl::Status> status;  // per entry
  // Whether the calling job is the last to finish (then every job's writes are visible to it).
  bool Last() { return left.fetch_sub(1, std::memory_order_acq_rel) == 1; }
};

// Runs run(tier, entries) on each disk tier's thread, for the entries by_tier[t] names (by
// segment index); p->left counts those jobs.
template <class Run>
void SubmitPerTier(const NodeSegments& segments, std::vector<std::vector<size_t>> by_tier,
                   Pending* p, Run run) {
  size_t jobs = 0;
  for (const auto& v : by_tier) jobs += v.empty() ? 0 : 1;
  p->left.store(jobs, std::memory_order_relaxed);
  for (size_t t = 0; t < by_tier.size(); ++t) {
    if (by_tier[t].empty()) continue;
    DiskTier* tier = segments.disk(t);
    tier->Submit([tier, which = std::move(by_tier[t]), run] { run(tier, which); });
  }
}

}  // namespace

bool DataHandlers::AnyDisk(const std::vector<proto::InlineEntry>& entries) const {
  for (const auto& e : entries) {
    if (p_.service->DiskAt(e.address)) return true;
  }
  return false;
}

std::optional<std::string> DataHandlers::ReadDisk(transport::RpcServer::ConnId conn,
                                                  const proto::FrameView& f,
                                                  std::vector<proto::InlineEntry> entries) {
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  const uint64_t id = f.header.request_id;
  std::vector<size_t> tiers;
  if (absl::Status st = DiskTiersOf(*p_.service, *p_.segments, entries, &tiers); !st.ok()) {
    return proto::EncodeFrame(reply_type, id, proto::StatusReply{proto::WireStatus::From(st)});
  }
  struct Read : Pending {
    std::vector<proto::InlineEntry> entries;
    std::string data;  // the reply's: values in entry order, then a header each
    std::vector<DiskRecordMeta> found;
  };
  auto job = std::make_shared<Read>();
  job->entries = std::move(entries);
  job->data.resize(proto::InlineDataBytes(job->entries));
  job->found.resize(job->entries.size());
  job->status.assign(job->entries.size(), absl::OkStatus());
  std::vector<std::vector<size_t>> by_tier(p_.service->segments().size());
  size_t at = 0;
  std::vector<size_t> value_at(job->entries.size());
  for (size_t j = 0; j < job->entries.size(); ++j) {
    value_at[j] = at;
    at += job->entries[j].length;
    by_tier[tiers[j]].push_back(j);
  }
  SubmitPerTier(
      *p_.segments, std::move(by_tier), job.get(),
      [this, job, value_at, conn, reply_type, id](DiskTier* tier,
                                                  const std::vector<size_t>& which) {
        std::vector<DiskStore::GetOp> ops;
        for (size_t j : which) {
          const proto::InlineEntry& e = job->entries[j];
          DiskStore::GetOp op;
          op.offset = e.address - tier->base();
          op.out = absl::MakeSpan(reinterpret_cast<unsigned char*>(job->data.data()) + value_at[j],
                                  e.length);
          op.found = &job->found[j];
          ops.push_back(op);
        }
        std::vector<absl::Status> st;
        tier->store().Get(absl::MakeSpan(ops), &st);
        for (size_t k = 0; k < which.size(); ++k) {
          job->status[which[k]] = st[k];
          if (absl::IsDataLoss(st[k])) p_.metrics->disk_checksum_failures->Inc();
          if (!st[k].ok() && !absl::IsDataLoss(st[k]) && !absl::IsUnavailable(st[k])) {
            p_.metrics->disk_errors[0]->Inc();
          }
        }
        if (!job->Last()) return;
        // The last tier's job: every status is in (the fetch_sub ordered the others' writes).
        uint64_t values = 0;
        for (size_t j = 0; j < job->entries.size(); ++j) {
          if (!job->status[j].ok()) {
            p_.reply(conn, proto::EncodeFrame(
                               reply_type, id,
                               proto::StatusReply{proto::WireStatus::From(job->status[j])}));
            return;
          }
          values += job->entries[j].length;
        }
        // The headers after the values, as a memory replica's: each says which object the value
        // is, so the client checks it against what the master granted.
        char* out = job->data.data() + values;
        for (size_t j = 0; j < job->entries.size(); ++j) {
          proto::AllocHeader h;
          h.generation = job->found[j].generation;
          h.key_hash = job->found[j].key_hash;
          h.value_length = job->found[j].value_length;
          std::memcpy(out, &h, proto::kAllocHeaderSize);
          out += proto::kAllocHeaderSize;
        }
        p_.metrics->disk_values[0]->Inc(job->entries.size());
        p_.metrics->disk_bytes[0]->Inc(values);
        p_.reply(conn,
                 proto::EncodeReadReplyFrame(reply_type, id, job->data.size(), [&](char* dst) {
                   std::memcpy(dst, job->data.data(), job->data.size());
                 }));
      });
  return std::nullopt;
}

std::optional<std::string> DataHandlers::WriteDisk(transport::RpcServer::ConnId conn,
                                                   const proto::FrameView& f,
                                                   const proto::WriteRequestView& req) {
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  const uint64_t id = f.header.request_id;
  auto refuse = [&](const absl::Status& st) {
    return proto::EncodeFrame(reply_type, id, proto::StatusReply{proto::WireStatus::From(st)});
  };
  std::vector<size_t> tiers;
  if (absl::Status st = DiskTiersOf(*p_.service, *p_.segments, req.entries, &tiers); !st.ok()) {
    return refuse(st);
  }
  if (req.keys.size() != req.entries.size()) {
    return refuse(absl::InvalidArgumentError(
        absl::StrCat("a write of ", req.entries.size(),
                     " values to a disk tier names no keys (a disk record keeps its tenant and "
                     "key; a client of protocol 14 cannot write a disk tier)")));
  }
  struct Write : Pending {
    std::string data;  // the request's headers and values, owned past the frame
    std::vector<DiskStore::PutOp> ops;
  };
  auto job = std::make_shared<Write>();
  job->data.assign(req.data.data(), req.data.size());
  job->ops.resize(req.entries.size());
  job->status.assign(req.entries.size(), absl::OkStatus());
  std::vector<std::vector<size_t>> by_tier(p_.service->segments().size());
  const unsigned char* in = reinterpret_cast<const unsigned char*>(job->data.data());
  for (size_t j = 0; j < req.entries.size(); ++j) {
    const proto::InlineEntry& e = req.entries[j];
    const SegmentSpan& span = p_.service->segments()[tiers[j]];
    proto::AllocHeader h;
    std::memcpy(&h, in, proto::kAllocHeaderSize);
    if (h.magic != proto::AllocHeader::kMagic || h.value_length != e.length) {
      return refuse(absl::InvalidArgumentError(
          absl::StrCat("write of ", e.length, " bytes at address ", e.address,
                       " carries a header that is not one for it (length ", h.value_length, ")")));
    }
    const uint64_t offset = e.address - span.base;
    const uint64_t bytes = DiskRecordBytes(req.tenant.size(), req.keys[j].size(), e.length);
    if (offset % kDiskBlock != 0 || bytes > span.size || offset > span.size - bytes) {
      return refuse(absl::InvalidArgumentError(
          absl::StrCat("write of a ", bytes, "-byte record at offset ", offset, " of disk tier '",
                       span.name, "' (", span.size, " bytes) is unaligned or outside it")));
    }
    DiskStore::PutOp& op = job->ops[j];
    op.offset = offset;
    op.meta.tenant = req.tenant;
    op.meta.key = req.keys[j];
    op.meta.generation = h.generation;
    op.meta.key_hash = h.key_hash;
    op.value = absl::MakeConstSpan(in + proto::kAllocHeaderSize, e.length);
    in += proto::kAllocHeaderSize + e.length;
    by_tier[tiers[j]].push_back(j);
  }
  SubmitPerTier(
      *p_.segments, std::move(by_tier), job.get(),
      [this, job, conn, reply_type, id](DiskTier* tier, const std::vector<size_t>& which) {
        std::vector<DiskStore::PutOp> ops;
        for (size_t j : which) ops.push_back(job->ops[j]);
        std::vector<absl::Status> st;
        tier->store().Put(absl::MakeSpan(ops), &st);
        for (size_t k = 0; k < which.size(); ++k) {
          job->status[which[k]] = st[k];
          if (!st[k].ok()) p_.metrics->disk_errors[1]->Inc();
        }
        if (!job->Last()) return;
        absl::Status first;
        uint64_t values = 0;
        for (size_t j = 0; j < job->ops.size(); ++j) {
          if (first.ok()) first = job->status[j];
          values += job->ops[j].value.size();
        }
        if (first.ok()) {
          p_.metrics->disk_values[1]->Inc(job->ops.size());
          p_.metrics->disk_bytes[1]->Inc(values);
        }
        p_.reply(conn, proto::EncodeFrame(reply_type, id,
                                          proto::StatusReply{proto::WireStatus::From(first)}));
      });
  return std::nullopt;
}

}  // namespace granary::node
