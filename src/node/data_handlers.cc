#include "node/data_handlers.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "proto/serve.h"

namespace granary::node {

DataHandlers::DataHandlers(Parts parts) : p_(std::move(parts)) {}

std::optional<std::string> DataHandlers::Dispatch(transport::RpcServer::ConnId conn,
                                                  const proto::FrameView& f) {
  using proto::MsgType;
  using proto::Tag;
  // Every message of proto/message_table.h that a node serves; the rest are refused, naming
  // who serves them.
  return proto::ServeFrame<proto::Server::kNode>(
      f,
      proto::Overloaded{[&](Tag<MsgType::kFetch>) { return Fetch(conn, f); },
                        [&](Tag<MsgType::kPush>) { return Push(conn, f); },
                        [&](Tag<MsgType::kRead>) { return Read(conn, f); },
                        [&](Tag<MsgType::kWrite>) { return Write(conn, f); }},
      [&](const absl::Status& st) {
        return proto::EncodeFrame(static_cast<uint16_t>(f.header.type | proto::kReplyBit),
                                  f.header.request_id,
                                  proto::StatusReply{proto::WireStatus::From(st)});
      });
}

void DataHandlers::Disconnected(transport::RpcServer::ConnId conn) {
  auto it = push_clients_.find(conn);
  if (it == push_clients_.end()) return;
  for (const auto& client : it->second) p_.rma->ForgetNode(client);
  push_clients_.erase(it);
}

int DataHandlers::DeviceOf(size_t index) const {
  const SegmentSpan& s = p_.service->segments()[index];
  return s.tier == proto::Tier::kGpu ? s.gpu : -1;
}

std::optional<std::string> DataHandlers::Fetch(transport::RpcServer::ConnId conn,
                                               const proto::FrameView& f) {
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  const uint64_t id = f.header.request_id;
  auto answer = [&](const absl::Status& st) {
    return proto::EncodeFrame(reply_type, id, proto::StatusReply{proto::WireStatus::From(st)});
  };
  auto req = proto::DecodeBody<proto::FetchRequest>(f.body);
  if (!req.ok()) return answer(req.status());
  if (absl::Status st = p_.service->CheckFetch(*req); !st.ok()) return answer(st);
  std::shared_ptr<transport::RemoteSegment> src = transport::RemoteSegmentOf(req->source);
  const uint64_t token = p_.watchdog->Start(
      "fetch", src->node_address, req->timeout_ms,
      [this, conn, reply_type, id](const absl::Status& st) {
        if (absl::IsDeadlineExceeded(st)) p_.metrics->fetch_timeouts->Inc();
        p_.reply(conn, proto::EncodeFrame(reply_type, id,
                                          proto::StatusReply{proto::WireStatus::From(st)}));
      });
  // bounce exists exactly when the node has GPU segments.
  const int device = p_.bounce != nullptr
                         ? DeviceOf(*p_.service->SegmentHolding(req->dest_address, req->length))
                         : -1;
  if (device >= 0) {
    // Into a GPU segment (a client that cannot map it): read into pinned slots, copied to the
    // device; answered once the last copy completed.
    src->pid = 0;  // never mapped
    GpuBounce::FetchJob job;
    job.peer = src;
    job.part = {device, req->dest_address, req->source_address, req->length};
    job.timeout_ms = req->timeout_ms;
    p_.bounce->Fetch(std::move(job),
                     [this, token](absl::Status st) { p_.watchdog->Finish(token, st); });
    return std::nullopt;
  }
  transport::RmaOp op;
  op.is_put = false;
  op.local = reinterpret_cast<void*>(req->dest_address);
  op.length = req->length;
  op.remote_addr = req->source_address;
  op.segment = src;
  p_.rma->Execute({op}, [this, token](absl::Status st) { p_.watchdog->Finish(token, st); });
  return std::nullopt;
}

std::optional<std::string> DataHandlers::Push(transport::RpcServer::ConnId conn,
                                              const proto::FrameView& f) {
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  const uint64_t id = f.header.request_id;
  auto answer = [&](const absl::Status& st) {
    proto::PushReply rep;
    rep.status = proto::WireStatus::From(st);
    return proto::EncodeFrame(reply_type, id, rep);
  };
  auto req = proto::DecodeBody<proto::PushRequest>(f.body);
  if (!req.ok()) return answer(req.status());
  std::vector<size_t> sources;
  if (absl::Status st = p_.service->CheckPush(*req, &sources); !st.ok()) return answer(st);
  const proto::SegmentInfo& dest = req->dest;
  std::vector<transport::RmaOp> ops;
  ops.reserve(req->entries.size());
  std::shared_ptr<transport::RemoteSegment> seg = transport::RemoteSegmentOf(dest);
  seg->pid = 0;  // the client's own liveness is its connection's; never mapped
  // A same-host client's buffer is forgotten with the connection that asked for the push: its
  // shared-memory endpoint cannot report the client's death. Another host's client keeps its
  // endpoint across reconnects (a link cut drops the connection, not the client) until UCX
  // reports it failed or a push to it times out: each worker-address endpoint closed leaves
  // UCX 1.13 state (an endpoint and tcp sockets) behind at the client, and churning them piled
  // up hundreds and aborted nodes in the soak (docs/architecture.md, "Changes from DESIGN").
  // Another node's segment (a GPU-tier Copy or Move) is never forgotten here: other copies may
  // be using that endpoint.
  if (absl::StartsWith(dest.node_address, proto::kClientPushPrefix) && seg->same_host) {
    auto& clients = push_clients_[conn];
    if (std::find(clients.begin(), clients.end(), dest.node_address) == clients.end()) {
      clients.push_back(dest.node_address);
    }
  }
  // Only a node with GPU segments (a bounce) looks for them: host-only nodes pay nothing.
  GpuBounce::PushJob job;
  bool gpu = false;
  if (p_.bounce != nullptr) {
    for (size_t i = 0; i < req->entries.size(); ++i) {
      const proto::PushEntry& e = req->entries[i];
      job.parts.push_back({DeviceOf(sources[i]), e.source_address, e.dest_address, e.length});
      gpu = gpu || job.parts.back().device >= 0;
    }
    for (uint64_t h : req->headers) {
      job.headers.push_back({DeviceOf(*p_.service->SegmentHolding(h, proto::kAllocHeaderSize)), h});
      gpu = gpu || job.headers.back().device >= 0;
    }
  }
  if (gpu) {
    // Out of a GPU segment: copied to pinned slots, written from there; the headers after.
    job.peer = seg;
    job.timeout_ms = req->timeout_ms;
    auto headers = std::make_shared<std::string>();
    const uint64_t token =
        p_.watchdog->Start("push", dest.node_address, req->timeout_ms,
                           [this, conn, reply_type, id, headers](const absl::Status& st) {
                             proto::PushReply rep;
                             rep.status = proto::WireStatus::From(st);
                             if (absl::IsDeadlineExceeded(st)) p_.metrics->push_timeouts->Inc();
                             if (st.ok()) rep.headers = std::move(*headers);
                             p_.reply(conn, proto::EncodeFrame(reply_type, id, rep));
                           });
    p_.bounce->Push(std::move(job), [this, token, headers](absl::Status st, std::string h) {
      *headers = std::move(h);  // read by the answer, which Finish runs after this
      p_.watchdog->Finish(token, st);
    });
    return std::nullopt;
  }
  for (size_t i = 0; i < req->entries.size(); ++i) {
    const proto::PushEntry& e = req->entries[i];
    transport::RmaOp op;
    op.is_put = true;
    op.local = reinterpret_cast<void*>(e.source_address);
    op.length = e.length;
    op.memh = p_.segments->region(sources[i])->memh();
    op.remote_addr = e.dest_address;
    op.segment = seg;
    ops.push_back(std::move(op));
  }
  // The headers are read once the values have been written (and flushed): a header that still
  // matches then vouches for the bytes sent before it. Past timeout_ms the watchdog closes the
  // endpoint to the client, holds the client off, and answers DEADLINE_EXCEEDED instead.
  const uint64_t token = p_.watchdog->Start(
      "push", dest.node_address, req->timeout_ms,
      [this, conn, reply_type, id, headers = std::move(req->headers)](const absl::Status& st) {
        proto::PushReply rep;
        rep.status = proto::WireStatus::From(st);
        if (absl::IsDeadlineExceeded(st)) p_.metrics->push_timeouts->Inc();
        if (st.ok()) {
          rep.headers.resize(headers.size() * proto::kAllocHeaderSize);
          for (size_t i = 0; i < headers.size(); ++i) {
            std::memcpy(rep.headers.data() + i * proto::kAllocHeaderSize,
                        reinterpret_cast<const void*>(headers[i]), proto::kAllocHeaderSize);
          }
        }
        p_.reply(conn, proto::EncodeFrame(reply_type, id, rep));
      });
  p_.rma->Execute(std::move(ops),
                  [this, token](absl::Status st) { p_.watchdog->Finish(token, st); });
  return std::nullopt;
}

std::optional<std::string> DataHandlers::Read(transport::RpcServer::ConnId conn,
                                              const proto::FrameView& f) {
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  auto req = proto::DecodeBody<proto::ReadRequest>(f.body);
  absl::Status st = req.status();
  if (st.ok()) st = p_.service->CheckInline("read", req->entries, std::nullopt);
  if (!st.ok()) {
    return proto::EncodeFrame(reply_type, f.header.request_id,
                              proto::StatusReply{proto::WireStatus::From(st)});
  }
  if (AnyDisk(req->entries)) return ReadDisk(conn, f, std::move(req->entries));
  const uint64_t data_bytes = proto::InlineDataBytes(req->entries);
  std::string frame =
      proto::EncodeReadReplyFrame(reply_type, f.header.request_id, data_bytes, [&](char* out) {
        for (const auto& e : req->entries) {
          std::memcpy(out, reinterpret_cast<const void*>(e.address + proto::kAllocHeaderSize),
                      e.length);
          out += e.length;
        }
        // The headers after the values (as a Push reads them): a header that still matches
        // then vouches for the value bytes read before it.
        std::atomic_thread_fence(std::memory_order_acquire);
        for (const auto& e : req->entries) {
          std::memcpy(out, reinterpret_cast<const void*>(e.address), proto::kAllocHeaderSize);
          out += proto::kAllocHeaderSize;
        }
      });
  p_.metrics->inline_values[0]->Inc(req->entries.size());
  p_.metrics->inline_bytes[0]->Inc(data_bytes - req->entries.size() * proto::kAllocHeaderSize);
  return frame;
}

std::optional<std::string> DataHandlers::Write(transport::RpcServer::ConnId conn,
                                               const proto::FrameView& f) {
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  auto req = proto::DecodeBody<proto::WriteRequestView>(f.body);
  absl::Status st = req.status();
  if (st.ok()) st = p_.service->CheckInline("write", req->entries, req->data.size());
  if (st.ok() && AnyDisk(req->entries)) return WriteDisk(conn, f, *req);
  if (st.ok()) {
    const char* in = req->data.data();
    uint64_t value_bytes = 0;
    for (const auto& e : req->entries) {
      std::memcpy(reinterpret_cast<void*>(e.address + proto::kAllocHeaderSize),
                  in + proto::kAllocHeaderSize, e.length);
      std::atomic_thread_fence(std::memory_order_release);
      std::memcpy(reinterpret_cast<void*>(e.address), in, proto::kAllocHeaderSize);
      in += proto::kAllocHeaderSize + e.length;
      value_bytes += e.length;
    }
    p_.metrics->inline_values[1]->Inc(req->entries.size());
    p_.metrics->inline_bytes[1]->Inc(value_bytes);
  }
  return proto::EncodeFrame(reply_type, f.header.request_id,
                            proto::StatusReply{proto::WireStatus::From(st)});
}

}  // namespace granary::node
