#include "node/node_server.h"

#include <httplib.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/log.h"
#include "common/size.h"
#include "common/util.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"

namespace granary::node {

namespace {
constexpr absl::Duration kRpcTimeout = absl::Seconds(5);
}

absl::StatusOr<std::unique_ptr<NodeServer>> NodeServer::Create(const NodeOptions& options) {
  absl::Status st = options.Validate();
  if (!st.ok()) return st;
  std::unique_ptr<NodeServer> n(new NodeServer());
  n->options_ = options;
  n->node_id_ = RandomId();
  if (options.gpu_segment_size > 0) {
    return absl::UnimplementedError(
        "--gpu_segment_size: GPU segments are not implemented in this build yet");
  }
  auto ctx = transport::Context::Create("granary_node");
  if (!ctx.ok()) return ctx.status();
  n->ctx_ = std::move(*ctx);
  auto worker = transport::Worker::Create(n->ctx_.get(), "node", &n->metrics_);
  if (!worker.ok()) return worker.status();
  n->worker_ = std::move(*worker);

  // Allocate and register up front, so the memory is charged at start, not by surprise later.
  if (options.host_segment_size > 0) {
    Segment seg;
    seg.name = "host0";
    if (options.segment_memory == "ucx" && !options.virtual_segments) {
      auto region = transport::MemoryRegion::Allocate(n->ctx_.get(), options.host_segment_size);
      if (region.ok()) {
        // First touch now, not on the data path, then pin.
        auto* base = static_cast<volatile char*>((*region)->addr());
        for (size_t off = 0; off < (*region)->length(); off += 4096) base[off] = 0;
        bool locked = mlock((*region)->addr(), (*region)->length()) == 0;
        if (!locked) {
          LOG_WARN << "host segment " << seg.name << ": mlock failed (" << strerror(errno)
                   << "); the memory may be swapped";
        }
        seg.region = std::move(*region);
        LOG_INFO << "host segment " << seg.name << ": " << FormatSize(options.host_segment_size)
                 << ", allocated by UCX (shared memory for same-host peers)"
                 << (locked ? ", locked" : ", not locked");
      } else {
        LOG_WARN << "host segment " << seg.name << ": UCX could not allocate it ("
                 << region.status().message() << "); falling back to mmap";
      }
    }
    if (seg.region == nullptr) {
      HostSegment::Options ho;
      ho.size = options.host_segment_size;
      ho.huge_pages = options.use_huge_pages;
      ho.populate = !options.virtual_segments;
      ho.lock = !options.virtual_segments;
      auto mem = HostSegment::Create(ho);
      if (!mem.ok()) return mem.status();
      seg.memory = std::move(*mem);
      auto region =
          transport::MemoryRegion::Create(n->ctx_.get(), seg.memory->data(), seg.memory->size());
      if (!region.ok()) return region.status();
      seg.region = std::move(*region);
      LOG_INFO << "host segment " << seg.name << ": " << FormatSize(ho.size)
               << (seg.memory->huge_pages() ? ", 2 MiB pages" : ", 4 KiB pages")
               << (seg.memory->locked() ? ", locked" : ", not locked")
               << (options.virtual_segments ? ", virtual (no data)" : "");
    }
    auto rkey = seg.region->PackRkey();
    if (!rkey.ok()) return rkey.status();
    seg.rkey = std::move(*rkey);
    n->segments_.push_back(std::move(seg));
  }

  // Clients connect here for Fetch (copy/move); data reads and writes need no request.
  n->rma_ = std::make_unique<transport::RmaEngine>(n->worker_.get());
  transport::RpcServer::Callbacks cb;
  NodeServer* self = n.get();
  cb.on_request = [self](transport::RpcServer::ConnId c, const proto::FrameView& f) {
    return self->HandleRequest(c, f);
  };
  // A client that pushed to this node is gone: drop the endpoint and rkeys made for it.
  cb.on_disconnect = [self](transport::RpcServer::ConnId c) {
    auto it = self->push_clients_.find(c);
    if (it == self->push_clients_.end()) return;
    for (const auto& client : it->second) self->rma_->ForgetNode(client);
    self->push_clients_.erase(it);
  };
  auto listener = transport::RpcServer::Create(n->worker_.get(), options.rpc_port, std::move(cb));
  if (!listener.ok()) return listener.status();
  n->listener_ = std::move(*listener);
  auto waddr = n->worker_->Address();
  if (!waddr.ok()) return waddr.status();
  n->worker_address_ = std::move(*waddr);

  n->mounts_ = n->metrics_.Counter("granary_node_mounts_total",
                                   "Times the node mounted its segments at a master");
  n->connected_ = n->metrics_.Gauge("granary_node_master_connected",
                                    "1 while the node has a live session with the master");
  uint64_t total = 0;
  for (const auto& s : n->segments_) total += s.region->length();
  n->metrics_
      .Gauge("granary_node_segment_bytes", "Bytes of memory contributed", {{"tier", "host"}})
      ->Set(static_cast<double>(total));
  NodeServer* raw = n.get();
  n->http_.server().Get("/metrics", [raw](const httplib::Request&, httplib::Response& res) {
    res.set_content(raw->metrics_.Render(), "text/plain; version=0.0.4");
  });
  n->http_.server().Get("/health", [raw](const httplib::Request&, httplib::Response& res) {
    bool up = raw->connected_->value() > 0;
    res.status = up ? 200 : 503;
    res.set_content(up ? "{\"status\":\"ok\"}" : "{\"status\":\"master not connected\"}",
                    "application/json");
  });
  st = n->http_.Start(options.metrics_host, options.metrics_port);
  if (!st.ok()) return st;
  LOG_INFO << "granary_node " << n->node_id_ << " listening on port " << n->listen_port()
           << ", http port " << n->http_port();
  return n;
}

NodeServer::~NodeServer() {
  Shutdown();
  master_.reset();
  listener_.reset();
  rma_.reset();
  for (auto& s : segments_) s.region.reset();
  worker_.reset();
  ctx_.reset();
}

std::optional<std::string> NodeServer::HandleRequest(transport::RpcServer::ConnId conn,
                                                     const proto::FrameView& f) {
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  const uint64_t id = f.header.request_id;
  auto answer = [&](const absl::Status& st) {
    return proto::EncodeFrame(reply_type, id, proto::StatusReply{proto::WireStatus::From(st)});
  };
  if (f.header.type == static_cast<uint16_t>(proto::MsgType::kPush)) return HandlePush(conn, f);
  if (f.header.type != static_cast<uint16_t>(proto::MsgType::kFetch)) {
    return answer(absl::InvalidArgumentError(absl::StrCat("a node answers only Fetch and Push; ",
                                                          proto::MsgTypeName(f.header.type),
                                                          " goes to the master")));
  }
  auto req = proto::DecodeBody<proto::FetchRequest>(f.body);
  if (!req.ok()) return answer(req.status());
  // The destination must lie inside one of this node's segments.
  if (SegmentHolding(req->dest_address, req->length) == nullptr) {
    return answer(absl::InvalidArgumentError(absl::StrCat("fetch of ", req->length,
                                                          " bytes to address ", req->dest_address,
                                                          " is outside this node's segments")));
  }
  if (req->source.worker_address.empty() || req->source.rkey.empty()) {
    return answer(absl::InvalidArgumentError("fetch without a source worker address and rkey"));
  }
  auto src = std::make_shared<transport::RemoteSegment>();
  src->segment_id = req->source.segment_id;
  src->node_address = req->source.node_address;
  src->rkey = req->source.rkey;
  src->worker_address = req->source.worker_address;
  transport::SetHostInfo(src.get(), req->source.host_id);
  transport::RmaOp op;
  op.is_put = false;
  op.local = reinterpret_cast<void*>(req->dest_address);
  op.length = req->length;
  op.remote_addr = req->source_address;
  op.segment = src;
  rma_->Execute({op}, [this, conn, reply_type, id](absl::Status st) {
    listener_->Reply(
        conn, proto::EncodeFrame(reply_type, id, proto::StatusReply{proto::WireStatus::From(st)}));
  });
  return std::nullopt;
}

const NodeServer::Segment* NodeServer::SegmentHolding(uint64_t address, uint64_t length) const {
  for (const auto& s : segments_) {
    auto base = reinterpret_cast<uint64_t>(s.region->addr());
    if (length > 0 && address >= base && address - base <= s.region->length() &&
        length <= s.region->length() - (address - base)) {
      return &s;
    }
  }
  return nullptr;
}

std::optional<std::string> NodeServer::HandlePush(transport::RpcServer::ConnId conn,
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
  const proto::SegmentInfo& dest = req->dest;
  if (dest.worker_address.empty() || dest.rkey.empty() || dest.node_address.empty()) {
    return answer(
        absl::InvalidArgumentError("push without the client's worker address, rkey and id"));
  }
  std::vector<transport::RmaOp> ops;
  ops.reserve(req->entries.size());
  auto seg = std::make_shared<transport::RemoteSegment>();
  seg->segment_id = dest.segment_id;
  seg->node_address = dest.node_address;
  seg->rkey = dest.rkey;
  seg->worker_address = dest.worker_address;
  transport::SetHostInfo(seg.get(), dest.host_id);
  seg->pid = 0;  // the client's own liveness is its connection's; never mapped
  for (const auto& e : req->entries) {
    const Segment* src = SegmentHolding(e.source_address, e.length);
    if (src == nullptr) {
      return answer(absl::InvalidArgumentError(
          absl::StrCat("push of ", e.length, " bytes from address ", e.source_address,
                       " is outside this node's segments")));
    }
    if (e.dest_address < dest.base || e.length > dest.size ||
        e.dest_address - dest.base > dest.size - e.length) {
      return answer(absl::InvalidArgumentError(absl::StrCat(
          "push of ", e.length, " bytes to address ", e.dest_address,
          " is outside the client's buffer at ", dest.base, " of ", dest.size, " bytes")));
    }
    transport::RmaOp op;
    op.is_put = true;
    op.local = reinterpret_cast<void*>(e.source_address);
    op.length = e.length;
    op.memh = src->region->memh();
    op.remote_addr = e.dest_address;
    op.segment = seg;
    ops.push_back(std::move(op));
  }
  for (uint64_t h : req->headers) {
    if (SegmentHolding(h, proto::kAllocHeaderSize) == nullptr) {
      return answer(absl::InvalidArgumentError(
          absl::StrCat("header at address ", h, " is outside this node's segments")));
    }
  }
  auto& clients = push_clients_[conn];
  if (std::find(clients.begin(), clients.end(), dest.node_address) == clients.end()) {
    clients.push_back(dest.node_address);
  }
  // The headers are read once the values have been written (and flushed): a header that still
  // matches then vouches for the bytes sent before it.
  rma_->Execute(std::move(ops), [this, conn, reply_type, id,
                                 headers = std::move(req->headers)](absl::Status st) {
    proto::PushReply rep;
    rep.status = proto::WireStatus::From(st);
    if (st.ok()) {
      rep.headers.resize(headers.size() * proto::kAllocHeaderSize);
      for (size_t i = 0; i < headers.size(); ++i) {
        std::memcpy(rep.headers.data() + i * proto::kAllocHeaderSize,
                    reinterpret_cast<const void*>(headers[i]), proto::kAllocHeaderSize);
      }
    }
    listener_->Reply(conn, proto::EncodeFrame(reply_type, id, rep));
  });
  return std::nullopt;
}

void NodeServer::SleepFor(int64_t ms) {
  granary::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(ms));
}

absl::Status NodeServer::ConnectAndMount() {
  master_.reset();
  for (auto& s : segments_) s.master_id = 0;
  auto client = transport::RpcClient::Create(worker_.get(), options_.master);
  if (!client.ok()) return client.status();
  master_ = std::move(*client);
  proto::HelloRequest hello;
  hello.role = proto::Role::kNode;
  hello.client_id = node_id_;
  auto rep = master_->Invoke<proto::HelloRequest, proto::HelloReply>(proto::MsgType::kHello, hello,
                                                                     kRpcTimeout);
  if (!rep.ok()) return rep.status();
  heartbeat_ms_ = std::max<uint32_t>(rep->heartbeat_interval_ms, 50);
  std::string host = options_.local_hostname;
  if (host.empty()) host = master_->LocalHost();
  if (host.empty()) host = "127.0.0.1";
  std::string address = HostPort{host, listen_port()}.ToString();
  for (auto& s : segments_) {
    proto::MountSegmentRequest m;
    m.name = s.name;
    m.node_id = node_id_;
    m.node_address = address;
    m.base = reinterpret_cast<uint64_t>(s.region->addr());
    m.size = s.region->length();
    m.tier = proto::Tier::kHost;
    m.rkey = s.rkey;
    m.pool = options_.pool;
    m.worker_address = worker_address_;
    m.host_id = transport::LocalHostId();
    auto mr = master_->Invoke<proto::MountSegmentRequest, proto::MountSegmentReply>(
        proto::MsgType::kMountSegment, m, kRpcTimeout);
    if (!mr.ok()) return mr.status();
    s.master_id = mr->segment_id;
    LOG_INFO << "mounted " << s.name << " at master " << options_.master << " as segment "
             << s.master_id << ", reachable at " << address;
  }
  mounts_->Inc();
  return absl::OkStatus();
}

void NodeServer::Run() {
  int64_t backoff = 100;
  bool warned = false;
  while (true) {
    {
      granary::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    if (!master_ || master_->broken()) {
      connected_->Set(0);
      absl::Status st = ConnectAndMount();
      if (!st.ok()) {
        if (!warned)
          LOG_WARN << "cannot register with master " << options_.master << ": " << st
                   << "; retrying";
        warned = true;
        master_.reset();
        SleepFor(backoff);
        backoff = std::min(backoff * 2, options_.reconnect_backoff_max_ms);
        continue;
      }
      warned = false;
      backoff = 100;
      connected_->Set(1);
    }
    SleepFor(heartbeat_ms_);
    if (master_ && !master_->broken()) {
      auto hb = master_->Invoke<proto::HeartbeatRequest, proto::HeartbeatReply>(
          proto::MsgType::kHeartbeat, proto::HeartbeatRequest{}, kRpcTimeout);
      if (!hb.ok()) {
        LOG_WARN << "heartbeat to master failed: " << hb.status() << "; reconnecting";
        master_.reset();
      }
    }
  }
  UnmountAll();
  connected_->Set(0);
}

void NodeServer::UnmountAll() {
  if (!master_ || master_->broken()) return;
  for (auto& s : segments_) {
    if (s.master_id == 0) continue;
    auto rep = master_->Invoke<proto::UnmountSegmentRequest, proto::StatusReply>(
        proto::MsgType::kUnmountSegment, proto::UnmountSegmentRequest{s.master_id},
        absl::Seconds(2));
    if (rep.ok()) {
      LOG_INFO << "unmounted segment " << s.master_id;
    } else {
      LOG_WARN << "unmount of segment " << s.master_id << " failed: " << rep.status();
    }
    s.master_id = 0;
  }
}

void NodeServer::Shutdown() {
  granary::MutexLock lock(&mu_);
  stopping_ = true;
}

}  // namespace granary::node
