#include "node/node_server.h"

#include <httplib.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/error_reason.h"
#include "common/etcd/master_view.h"
#include "common/log.h"
#include "common/size.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "cuda/device_backend.h"
#include "node/memory_limits.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"

namespace granary::node {

namespace {
constexpr absl::Duration kRpcTimeout = absl::Seconds(5);
// How long the master parks an InventorySync with nothing to send; also the longest Shutdown
// waits for the sync thread.
constexpr uint32_t kSyncWaitMs = 500;
// A report batch: bounded in records and key bytes, far below the frame limit.
constexpr size_t kReportBatchBytes = 4u << 20;
// Inventory report batches in flight at once during a re-mount.
constexpr size_t kReportWindow = 4;

std::string NumaText(int numa_node) {
  return numa_node < 0 ? ", NUMA node not bound" : absl::StrCat(", on NUMA node ", numa_node);
}
}  // namespace

absl::StatusOr<std::unique_ptr<NodeServer>> NodeServer::Create(const NodeOptions& options) {
  GRANARY_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<NodeServer> n(new NodeServer());
  n->options_ = options;
  n->log_route_.level = options.log_level;
  ScopedLogRoute route(&n->log_route_);
  n->node_id_ = RandomId();
  if (std::optional<std::string> endpoints = etcd::EndpointsOfMasterAddress(options.master)) {
    GRANARY_ASSIGN_OR_RETURN(n->etcd_, etcd::EtcdClient::Create(*endpoints, 1000));
  }
  GRANARY_RETURN_IF_ERROR(n->ChooseTopology());
  std::vector<std::pair<std::string, std::string>> ucx;
  if (!n->nic_.device.empty()) ucx.emplace_back("NET_DEVICES", n->nic_.device);
  GRANARY_ASSIGN_OR_RETURN(n->ctx_, transport::Context::Create("granary_node", ucx));
  transport::LogNetDeviceChoice(n->nic_, *n->ctx_, &n->metrics_, "granary_node_net_device");
  GRANARY_ASSIGN_OR_RETURN(n->worker_,
                           transport::Worker::Create(n->ctx_.get(), "node", &n->metrics_));
  n->worker_->Post([r = &n->log_route_] { SetThreadLogRoute(r); });

  // Allocate and register up front, so the memory is charged at start, not by surprise later.
  std::vector<SegmentSpan> spans;
  if (options.host_segment_size > 0) {
    GRANARY_RETURN_IF_ERROR(n->AddHostSegment(options.host_segment_name, &spans));
  }
  if (options.gpu_segment_size > 0) {
    const std::vector<int> devices =
        options.gpu_devices.empty() ? std::vector<int>{0} : options.gpu_devices;
    for (int device : devices) GRANARY_RETURN_IF_ERROR(n->AddGpuSegment(device, &spans));
  }
  n->service_ = std::make_unique<NodeService>(std::move(spans));
  n->inventory_ = std::make_unique<NodeInventory>(&n->service_->segments());

  // Clients connect here for Fetch (copy/move); data reads and writes need no request.
  n->rma_ = std::make_unique<transport::RmaEngine>(n->worker_.get());
  constexpr absl::string_view kTimeoutsHelp =
      "Pushes into a client's buffer and fetches from another node that did not finish within "
      "the request's timeout_ms (the peer is then held off with jittered exponential back-off)";
  n->push_timeouts_ = n->metrics_.Counter("granary_node_transfer_timeouts_total", kTimeoutsHelp,
                                          {{"kind", "push"}});
  n->fetch_timeouts_ = n->metrics_.Counter("granary_node_transfer_timeouts_total", kTimeoutsHelp,
                                           {{"kind", "fetch"}});
  n->peer_refusals_ = n->metrics_.Counter(
      "granary_node_peer_refusals_total",
      "Pushes and fetches refused at once because their peer is held off after a timeout");
  n->rma_->set_refusal_counter(n->peer_refusals_);
  for (int op = 0; op < 2; ++op) {
    const std::string name = op == 0 ? "read" : "write";
    n->inline_values_[op] = n->metrics_.Counter(
        "granary_node_inline_values_total",
        "Values read or written inline in Read and Write messages (clients over tcp)",
        {{"op", name}});
    n->inline_bytes_[op] = n->metrics_.Counter(
        "granary_node_inline_bytes_total",
        "Value bytes read or written inline in Read and Write messages", {{"op", name}});
  }
  transport::RmaEngine* rma = n->rma_.get();
  n->watchdog_ = std::make_unique<TransferWatchdog>(
      [rma](const std::vector<std::string>& peers) { rma->MarkUnreachable(peers); });
  if (options.gpu_segment_size > 0) {
    GRANARY_ASSIGN_OR_RETURN(
        n->bounce_, GpuBounce::Create(&cuda::ActiveBackend(), n->ctx_.get(), rma, &n->metrics_));
  }
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
  GRANARY_ASSIGN_OR_RETURN(
      n->listener_,
      transport::RpcServer::Create(n->worker_.get(),
                                   {options.rpc_host, options.rpc_port, &n->metrics_, "node rpc"},
                                   std::move(cb)));
  GRANARY_ASSIGN_OR_RETURN(n->worker_address_, n->worker_->Address());

  n->mounts_ = n->metrics_.Counter("granary_node_mounts_total",
                                   "Times the node mounted its segments at a master");
  n->connected_ = n->metrics_.Gauge("granary_node_master_connected",
                                    "1 while the node has a live session with the master");
  n->connect_failures_ = n->metrics_.Counter(
      "granary_node_master_connect_failures_total",
      "Failed attempts to register with the master (retried with jittered exponential back-off)");
  n->records_applied_ = n->metrics_.Counter(
      "granary_node_inventory_records_total",
      "Commit and free records from the master applied to the node's inventory");
  n->records_reported_ =
      n->metrics_.Counter("granary_node_inventory_reported_total",
                          "Inventory entries reported to a master after a re-mount");
  n->mismatches_ = n->metrics_.Counter(
      "granary_node_inventory_mismatches_total",
      "Inventory entries dropped because the allocation header in memory disagreed");
  n->inventory_entries_ =
      n->metrics_.Gauge("granary_node_inventory_entries", "Committed objects in the inventory");
  uint64_t host_bytes = 0, gpu_bytes = 0;
  for (const auto& s : n->service_->segments()) {
    (s.tier == proto::Tier::kGpu ? gpu_bytes : host_bytes) += s.size;
  }
  n->metrics_
      .Gauge("granary_node_segment_bytes", "Bytes of memory contributed", {{"tier", "host"}})
      ->Set(static_cast<double>(host_bytes));
  n->metrics_.Gauge("granary_node_segment_bytes", "Bytes of memory contributed", {{"tier", "gpu"}})
      ->Set(static_cast<double>(gpu_bytes));
  // Which device backend this process runs on (cuda, none, or the CPU-only fake, which is only
  // ever chosen explicitly): a fake in production shows here.
  n->metrics_
      .Gauge("granary_device_backend", "1 for the device backend this process uses",
             {{"backend", std::string(cuda::ActiveBackendName())}})
      ->Set(1);
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
  if (options.serve_http) {
    GRANARY_RETURN_IF_ERROR(n->http_.Start(options.metrics_host, options.metrics_port));
  }
  LOG_INFO << "granary_node " << n->node_id_ << " listening on port " << n->listen_port()
           << ", http port " << n->http_port();
  return n;
}

absl::Status NodeServer::ChooseTopology() {
  GRANARY_ASSIGN_OR_RETURN(topology_, transport::Topology::Read(options_.sysfs_root));
  int gpu = -1;
  if (options_.gpu_segment_size > 0)
    gpu = options_.gpu_devices.empty() ? 0 : options_.gpu_devices[0];
  absl::StatusOr<transport::NetDeviceChoice> c =
      transport::ChooseNetDevice(topology_, options_.device_name, gpu);
  if (!c.ok()) {
    // "device_name '...' is not ..." is the flag's value.
    const bool flag = absl::StartsWith(c.status().message(), "device_name");
    return absl::Status(c.status().code(), absl::StrCat(flag ? "--" : "", c.status().message()));
  }
  nic_ = *c;
  host_numa_node_ = nic_.numa_node;
  if (options_.numa_node >= 0) {
    if (!topology_.HasNumaNode(options_.numa_node)) {
      std::vector<std::string> nodes;
      for (const auto& numa : topology_.numa_nodes()) nodes.push_back(absl::StrCat(numa.id));
      return absl::InvalidArgumentError(absl::StrCat(
          "--numa_node=", options_.numa_node, " is not a NUMA node of this host (",
          options_.sysfs_root,
          "/devices/system/node has: ", nodes.empty() ? "none" : absl::StrJoin(nodes, ", "), ")"));
    }
    host_numa_node_ = options_.numa_node;
  }
  return absl::OkStatus();
}

void NodeServer::PlaceSpan(SegmentSpan* span, int gpu) {
  span->nic = nic_.device;
  span->gpu = gpu >= 0 ? gpu : nic_.gpu;
  span->numa_node = host_numa_node_;
  if (gpu >= 0) {
    span->numa_node = -1;
    for (const auto& g : topology_.gpus()) {
      if (g.index == gpu) span->numa_node = g.numa_node;
    }
  }
  metrics_
      .Gauge("granary_node_segment_numa_node",
             "The NUMA node a segment's memory is on (-1: not bound, or unknown), with its NIC "
             "and GPU",
             {{"segment", span->name}, {"nic", span->nic}, {"gpu", absl::StrCat(span->gpu)}})
      ->Set(span->numa_node);
}

absl::Status NodeServer::AddHostSegment(const std::string& name, std::vector<SegmentSpan>* spans) {
  const NodeOptions& options = options_;
  if (!options.virtual_segments) {
    // Before anything is allocated: a size larger than the machine can hold is refused here,
    // not found out by UCX test-writing its shared-memory file until the kernel kills processes.
    if (absl::StatusOr<MachineMemory> machine = ReadMachineMemory(); machine.ok()) {
      GRANARY_RETURN_IF_ERROR(
          CheckHostSegmentFits("host segment " + name, options.host_segment_size, *machine));
    } else {
      LOG_WARN << "host segment " << name << ": its size is not checked against the machine's "
               << "memory: " << machine.status().message();
    }
  }
  Segment seg;
  if (options.segment_memory == "ucx" && !options.virtual_segments) {
    auto region = transport::MemoryRegion::Allocate(ctx_.get(), options.host_segment_size);
    if (region.ok() && host_numa_node_ >= 0) {
      // Bound before the first touch (pages UCX touched already are moved).
      GRANARY_RETURN_IF_ERROR(
          BindToNumaNode((*region)->addr(), (*region)->length(), host_numa_node_));
    }
    if (region.ok()) {
      // First touch now, not on the data path, then pin.
      auto* base = static_cast<volatile char*>((*region)->addr());
      for (size_t off = 0; off < (*region)->length(); off += 4096) base[off] = 0;
      bool locked = mlock((*region)->addr(), (*region)->length()) == 0;
      if (!locked && options.require_mlock) {
        return absl::FailedPreconditionError(
            absl::StrCat("host segment ", name, ": mlock of ",
                         FormatSize(options.host_segment_size), " failed (", strerror(errno),
                         "); under --cgroup the segment must be locked: raise RLIMIT_MEMLOCK "
                         "(LimitMEMLOCK=infinity) or grant CAP_IPC_LOCK"));
      }
      if (!locked) {
        LOG_WARN << "host segment " << name << ": mlock failed (" << strerror(errno)
                 << "); the memory may be swapped";
      }
      seg.region = std::move(*region);
      LOG_INFO << "host segment " << name << ": " << FormatSize(options.host_segment_size)
               << ", allocated by UCX (shared memory for same-host peers)"
               << (locked ? ", locked" : ", not locked") << NumaText(host_numa_node_);
    } else {
      LOG_WARN << "host segment " << name << ": UCX could not allocate it ("
               << region.status().message() << "); falling back to mmap";
    }
  }
  if (seg.region == nullptr) {
    HostSegment::Options ho;
    ho.size = options.host_segment_size;
    ho.huge_pages = options.use_huge_pages;
    ho.populate = !options.virtual_segments;
    ho.lock = !options.virtual_segments;
    ho.numa_node = host_numa_node_;
    GRANARY_ASSIGN_OR_RETURN(seg.memory, HostSegment::Create(ho));
    if (options.require_mlock && ho.lock && !seg.memory->locked()) {
      return absl::FailedPreconditionError(
          absl::StrCat("host segment ", name, ": mlock of ", FormatSize(ho.size),
                       " failed; under --cgroup the segment must be locked: raise RLIMIT_MEMLOCK "
                       "(LimitMEMLOCK=infinity) or grant CAP_IPC_LOCK"));
    }
    GRANARY_ASSIGN_OR_RETURN(seg.region, transport::MemoryRegion::Create(
                                             ctx_.get(), seg.memory->data(), seg.memory->size()));
    LOG_INFO << "host segment " << name << ": " << FormatSize(ho.size)
             << (seg.memory->huge_pages() ? ", 2 MiB pages" : ", 4 KiB pages")
             << (seg.memory->locked() ? ", locked" : ", not locked")
             << (options.virtual_segments ? ", virtual (no data)" : "")
             << (options.virtual_segments ? "" : NumaText(host_numa_node_));
  }
  SegmentSpan span;
  span.name = name;
  span.base = reinterpret_cast<uint64_t>(seg.region->addr());
  span.size = seg.region->length();
  span.tier = proto::Tier::kHost;
  PlaceSpan(&span, -1);
  GRANARY_ASSIGN_OR_RETURN(span.rkey, seg.region->PackRkey());
  spans->push_back(std::move(span));
  segments_.push_back(std::move(seg));
  return absl::OkStatus();
}

absl::Status NodeServer::AddGpuSegment(int device, std::vector<SegmentSpan>* spans) {
  const std::string name = absl::StrCat("gpu", device);
  const std::string flag = options_.gpu_segment_size_flag.empty()
                               ? absl::StrCat(options_.gpu_segment_size)
                               : options_.gpu_segment_size_flag;
  Segment seg;
  GRANARY_ASSIGN_OR_RETURN(
      seg.gpu, GpuSegment::Create(&cuda::ActiveBackend(), device, options_.gpu_segment_size, flag));
  SegmentSpan span;
  span.name = name;
  span.base = reinterpret_cast<uint64_t>(seg.gpu->base());
  span.size = seg.gpu->size();
  span.tier = proto::Tier::kGpu;
  span.gpu_ipc = seg.gpu->ipc();
  span.gpu_uuid.assign(reinterpret_cast<const char*>(seg.gpu->uuid().data()),
                       seg.gpu->uuid().size());
  PlaceSpan(&span, device);
  // Mapped with UCX only where UCX supports CUDA memory (the thin branch of GPU.md section 1):
  // then clients that cannot open the IPC handle move its bytes through UCX. Debian's UCX has no
  // CUDA support and would touch device memory from the CPU: never mapped there (no rkey), and
  // such clients go through the node bounce.
  std::string ucx =
      "not mapped with UCX (this UCX has no CUDA memory support): other hosts go "
      "through the node bounce";
  if (ctx_->SupportsCudaMemory()) {
    absl::StatusOr<std::unique_ptr<transport::MemoryRegion>> region =
        transport::MemoryRegion::Create(ctx_.get(), seg.gpu->base(), seg.gpu->size(),
                                        /*cuda=*/true);
    absl::StatusOr<std::string> rkey =
        region.ok() ? (*region)->PackRkey() : absl::StatusOr<std::string>(region.status());
    if (rkey.ok()) {
      seg.region = *std::move(region);
      span.rkey = *std::move(rkey);
      ucx =
          "mapped with UCX as CUDA memory: clients that cannot open the IPC handle move its "
          "bytes through UCX";
    } else {
      ucx = absl::StrCat("this UCX supports CUDA memory, but mapping the segment failed (",
                         rkey.status().message(), "): other hosts go through the node bounce");
    }
  }
  LOG_INFO << "GPU segment " << name << ": " << FormatSize(span.size) << " on device " << device
           << " (" << cuda::ActiveBackendName() << " backend, UUID "
           << absl::BytesToHexString(span.gpu_uuid) << "), exported for same-host IPC; " << ucx;
  spans->push_back(std::move(span));
  segments_.push_back(std::move(seg));
  return absl::OkStatus();
}

NodeServer::~NodeServer() {
  ScopedLogRoute route(&log_route_);  // closing connections may log
  Shutdown();
  if (sync_.joinable()) sync_.join();
  {
    granary::MutexLock lock(&mu_);
    sync_master_.reset();
  }
  master_.reset();
  if (watchdog_) watchdog_->Stop();  // no deadline fires (and uses rma_) from here on
  listener_.reset();
  if (bounce_) bounce_->Stop();  // no staged job uses rma_ from here on
  rma_.reset();
  watchdog_.reset();  // after rma_: a transfer it ends still reports to the watchdog
  bounce_.reset();    // its slots' registrations, before the context; before the GPU segments
  for (auto& s : segments_) {
    s.region.reset();
    s.gpu.reset();
  }
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
  if (f.header.type == static_cast<uint16_t>(proto::MsgType::kRead)) return HandleRead(f);
  if (f.header.type == static_cast<uint16_t>(proto::MsgType::kWrite)) return HandleWrite(f);
  if (f.header.type != static_cast<uint16_t>(proto::MsgType::kFetch)) {
    return answer(absl::InvalidArgumentError(
        absl::StrCat("a node answers only Fetch, Push, Read and Write; ",
                     proto::MsgTypeName(f.header.type), " goes to the master")));
  }
  auto req = proto::DecodeBody<proto::FetchRequest>(f.body);
  if (!req.ok()) return answer(req.status());
  if (absl::Status st = service_->CheckFetch(*req); !st.ok()) return answer(st);
  auto src = std::make_shared<transport::RemoteSegment>();
  src->segment_id = req->source.segment_id;
  src->node_address = req->source.node_address;
  src->rkey = req->source.rkey;
  src->worker_address = req->source.worker_address;
  transport::SetHostInfo(src.get(), req->source.host_id);
  const uint64_t token = watchdog_->Start(
      "fetch", src->node_address, req->timeout_ms,
      [this, conn, reply_type, id](const absl::Status& st) {
        if (absl::IsDeadlineExceeded(st)) fetch_timeouts_->Inc();
        Reply(conn,
              proto::EncodeFrame(reply_type, id, proto::StatusReply{proto::WireStatus::From(st)}));
      });
  // bounce_ exists exactly when the node has GPU segments.
  const int device =
      bounce_ ? DeviceOf(*service_->SegmentHolding(req->dest_address, req->length)) : -1;
  if (device >= 0) {
    // Into a GPU segment (a client that cannot map it): read into pinned slots, copied to the
    // device; answered once the last copy completed.
    src->pid = 0;  // never mapped
    GpuBounce::FetchJob job;
    job.peer = src;
    job.part = {device, req->dest_address, req->source_address, req->length};
    job.timeout_ms = req->timeout_ms;
    bounce_->Fetch(std::move(job),
                   [this, token](absl::Status st) { watchdog_->Finish(token, st); });
    return std::nullopt;
  }
  transport::RmaOp op;
  op.is_put = false;
  op.local = reinterpret_cast<void*>(req->dest_address);
  op.length = req->length;
  op.remote_addr = req->source_address;
  op.segment = src;
  rma_->Execute({op}, [this, token](absl::Status st) { watchdog_->Finish(token, st); });
  return std::nullopt;
}

int NodeServer::DeviceOf(size_t index) const {
  const SegmentSpan& s = service_->segments()[index];
  return s.tier == proto::Tier::kGpu ? s.gpu : -1;
}

void NodeServer::Reply(transport::RpcServer::ConnId conn, std::string frame) {
  if (listener_) listener_->Reply(conn, std::move(frame));  // null once the node is going away
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
  std::vector<size_t> sources;
  if (absl::Status st = service_->CheckPush(*req, &sources); !st.ok()) return answer(st);
  const proto::SegmentInfo& dest = req->dest;
  std::vector<transport::RmaOp> ops;
  ops.reserve(req->entries.size());
  auto seg = std::make_shared<transport::RemoteSegment>();
  seg->segment_id = dest.segment_id;
  seg->node_address = dest.node_address;
  seg->rkey = dest.rkey;
  seg->worker_address = dest.worker_address;
  transport::SetHostInfo(seg.get(), dest.host_id);
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
  // Only a node with GPU segments (bounce_) looks for them: host-only nodes pay nothing.
  GpuBounce::PushJob job;
  bool gpu = false;
  if (bounce_) {
    for (size_t i = 0; i < req->entries.size(); ++i) {
      const proto::PushEntry& e = req->entries[i];
      job.parts.push_back({DeviceOf(sources[i]), e.source_address, e.dest_address, e.length});
      gpu = gpu || job.parts.back().device >= 0;
    }
    for (uint64_t h : req->headers) {
      job.headers.push_back({DeviceOf(*service_->SegmentHolding(h, proto::kAllocHeaderSize)), h});
      gpu = gpu || job.headers.back().device >= 0;
    }
  }
  if (gpu) {
    // Out of a GPU segment: copied to pinned slots, written from there; the headers after.
    job.peer = seg;
    job.timeout_ms = req->timeout_ms;
    auto headers = std::make_shared<std::string>();
    const uint64_t token =
        watchdog_->Start("push", dest.node_address, req->timeout_ms,
                         [this, conn, reply_type, id, headers](const absl::Status& st) {
                           proto::PushReply rep;
                           rep.status = proto::WireStatus::From(st);
                           if (absl::IsDeadlineExceeded(st)) push_timeouts_->Inc();
                           if (st.ok()) rep.headers = std::move(*headers);
                           Reply(conn, proto::EncodeFrame(reply_type, id, rep));
                         });
    bounce_->Push(std::move(job), [this, token, headers](absl::Status st, std::string h) {
      *headers = std::move(h);  // read by the answer, which Finish runs after this
      watchdog_->Finish(token, st);
    });
    return std::nullopt;
  }
  for (size_t i = 0; i < req->entries.size(); ++i) {
    const proto::PushEntry& e = req->entries[i];
    transport::RmaOp op;
    op.is_put = true;
    op.local = reinterpret_cast<void*>(e.source_address);
    op.length = e.length;
    op.memh = segments_[sources[i]].region->memh();
    op.remote_addr = e.dest_address;
    op.segment = seg;
    ops.push_back(std::move(op));
  }
  // The headers are read once the values have been written (and flushed): a header that still
  // matches then vouches for the bytes sent before it. Past timeout_ms the watchdog closes the
  // endpoint to the client, holds the client off, and answers DEADLINE_EXCEEDED instead.
  const uint64_t token = watchdog_->Start(
      "push", dest.node_address, req->timeout_ms,
      [this, conn, reply_type, id, headers = std::move(req->headers)](const absl::Status& st) {
        proto::PushReply rep;
        rep.status = proto::WireStatus::From(st);
        if (absl::IsDeadlineExceeded(st)) push_timeouts_->Inc();
        if (st.ok()) {
          rep.headers.resize(headers.size() * proto::kAllocHeaderSize);
          for (size_t i = 0; i < headers.size(); ++i) {
            std::memcpy(rep.headers.data() + i * proto::kAllocHeaderSize,
                        reinterpret_cast<const void*>(headers[i]), proto::kAllocHeaderSize);
          }
        }
        Reply(conn, proto::EncodeFrame(reply_type, id, rep));
      });
  rma_->Execute(std::move(ops), [this, token](absl::Status st) { watchdog_->Finish(token, st); });
  return std::nullopt;
}

std::string NodeServer::HandleRead(const proto::FrameView& f) {
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  auto req = proto::DecodeBody<proto::ReadRequest>(f.body);
  absl::Status st = req.status();
  if (st.ok()) st = service_->CheckInline("read", req->entries, std::nullopt);
  if (!st.ok()) {
    return proto::EncodeFrame(reply_type, f.header.request_id,
                              proto::StatusReply{proto::WireStatus::From(st)});
  }
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
  inline_values_[0]->Inc(req->entries.size());
  inline_bytes_[0]->Inc(data_bytes - req->entries.size() * proto::kAllocHeaderSize);
  return frame;
}

std::string NodeServer::HandleWrite(const proto::FrameView& f) {
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  auto req = proto::DecodeBody<proto::WriteRequestView>(f.body);
  absl::Status st = req.status();
  if (st.ok()) st = service_->CheckInline("write", req->entries, req->data.size());
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
    inline_values_[1]->Inc(req->entries.size());
    inline_bytes_[1]->Inc(value_bytes);
  }
  return proto::EncodeFrame(reply_type, f.header.request_id,
                            proto::StatusReply{proto::WireStatus::From(st)});
}

void NodeServer::SleepFor(int64_t ms) {
  granary::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(ms));
}

absl::Status NodeServer::ConnectAndMount() {
  {
    granary::MutexLock lock(&mu_);
    sync_master_.reset();  // no poll on a connection that is being replaced
  }
  master_.reset();
  GRANARY_ASSIGN_OR_RETURN(const std::string address, ResolveMaster());
  last_master_address_ = address;
  // Mounted before, in this process: the segments may hold objects a (restarted) master should
  // restore, and that master's clients may still be writing.
  const bool resumed = mounts_->value() > 0;
  service_->BeginSession();
  GRANARY_ASSIGN_OR_RETURN(master_, transport::RpcClient::Create(worker_.get(), address,
                                                                 /*try_shm=*/true, kRpcTimeout));
  proto::HelloRequest hello;
  hello.role = proto::Role::kNode;
  hello.client_id = node_id_;
  GRANARY_ASSIGN_OR_RETURN(proto::HelloReply rep,
                           (master_->Invoke<proto::HelloRequest, proto::HelloReply>(
                               proto::MsgType::kHello, hello, kRpcTimeout)));
  GRANARY_RETURN_IF_ERROR(
      epochs_.Accept(static_cast<int64_t>(rep.epoch), absl::StrCat("the master at ", address)));
  highest_epoch_->store(epochs_.highest());
  // Every request carries the epoch from now on, and every reply (the inventory's commit and
  // free records included) must carry it: a deposed master's are refused.
  if (rep.epoch != 0) master_->SetEpochFence(static_cast<int64_t>(rep.epoch), highest_epoch_);
  heartbeat_ms_ = std::max<uint32_t>(rep.heartbeat_interval_ms, 50);
  std::string host = options_.local_hostname;
  if (host.empty()) host = master_->LocalHost();
  if (host.empty()) host = "127.0.0.1";
  MountIdentity who;
  who.node_id = node_id_;
  who.node_address = HostPort{host, listen_port()}.ToString();
  who.pool = options_.pool;
  who.worker_address = worker_address_;
  who.host_id = transport::LocalHostId();
  for (size_t i = 0; i < service_->segments().size(); ++i) {
    GRANARY_ASSIGN_OR_RETURN(
        proto::MountSegmentReply mr,
        (master_->Invoke<proto::MountSegmentRequest, proto::MountSegmentReply>(
            proto::MsgType::kMountSegment, service_->MountRequest(i, who, resumed), kRpcTimeout)));
    service_->SetMounted(i, mr.segment_id);
    LOG_INFO << "mounted " << service_->segments()[i].name << " at master " << address
             << " as segment " << mr.segment_id << ", reachable at " << who.node_address;
  }
  if (resumed) GRANARY_RETURN_IF_ERROR(ReportInventory());
  mounts_->Inc();
  granary::MutexLock lock(&mu_);
  sync_master_ = master_;
  return absl::OkStatus();
}

absl::Status NodeServer::ReportInventory() {
  const int64_t t0 = MonotonicUs();
  const uint64_t mismatches_before = inventory_->mismatches();
  const std::vector<uint64_t> ids = service_->MountedIds();
  NodeInventory::ReportCursor cursor = inventory_->BeginReport();
  // Streamed: up to kReportWindow batches in flight while the next is built, so the node's
  // building and encoding overlap the master's restoring. The master handles one connection's
  // requests in order; the last batch (which ends the report) still waits for every other
  // batch's answer, so that nothing of the report is outstanding when the master ends it.
  struct Pending {
    std::promise<absl::StatusOr<std::string>> reply;
  };
  std::deque<std::shared_ptr<Pending>> in_flight;
  uint64_t sent = 0, restored = 0, rejected = 0, batches = 0;
  auto await_oldest = [&]() -> absl::Status {
    std::shared_ptr<Pending> p = std::move(in_flight.front());
    in_flight.pop_front();
    auto fut = p->reply.get_future();
    if (fut.wait_for(absl::ToChronoNanoseconds(kRpcTimeout)) != std::future_status::ready) {
      return absl::DeadlineExceededError(
          absl::StrCat("the master did not answer an inventory report batch within ",
                       absl::FormatDuration(kRpcTimeout)));
    }
    absl::StatusOr<std::string> frame = fut.get();
    if (!frame.ok()) return frame.status();
    GRANARY_ASSIGN_OR_RETURN(proto::InventoryReportReply rep,
                             transport::RpcClient::ParseReply<proto::InventoryReportReply>(*frame));
    restored += rep.restored;
    rejected += rep.rejected;
    return absl::OkStatus();
  };
  int64_t build_us = MonotonicUs() - t0;
  auto next_batch = [&] {
    const int64_t b0 = MonotonicUs();
    auto batch = inventory_->NextBatch(&cursor, ids, proto::kMaxInventoryBatch, kReportBatchBytes);
    build_us += MonotonicUs() - b0;
    return batch;
  };
  std::vector<proto::InventoryRecord> current = next_batch();
  while (true) {
    std::vector<proto::InventoryRecord> next;
    if (!current.empty()) next = next_batch();
    proto::InventoryReportRequest req;
    req.last = next.empty();
    req.total = cursor.total;
    req.records = std::move(current);
    sent += req.records.size();
    ++batches;
    if (req.last) {
      while (!in_flight.empty()) GRANARY_RETURN_IF_ERROR(await_oldest());
    } else if (in_flight.size() >= kReportWindow) {
      GRANARY_RETURN_IF_ERROR(await_oldest());
    }
    auto p = std::make_shared<Pending>();
    in_flight.push_back(p);
    master_->CallAsync(
        proto::EncodeFrame(static_cast<uint16_t>(proto::MsgType::kInventoryReport), 0, req),
        [p](absl::StatusOr<std::string> frame) { p->reply.set_value(std::move(frame)); });
    if (req.last) break;
    current = std::move(next);
  }
  GRANARY_RETURN_IF_ERROR(await_oldest());
  const uint64_t dropped = inventory_->mismatches() - mismatches_before;
  mismatches_->Inc(dropped);
  records_reported_->Inc(sent);
  inventory_entries_->Set(static_cast<double>(inventory_->size()));
  LOG_INFO << "reported " << sent << " inventory entr" << (sent == 1 ? "y" : "ies") << " to master "
           << options_.master << " in " << batches << " batch" << (batches == 1 ? "" : "es")
           << " and " << (MonotonicUs() - t0) / 1000 << " ms (" << build_us / 1000
           << " ms of it building them): " << restored << " restored, " << rejected << " refused; "
           << dropped << " dropped here (header mismatch)";
  return absl::OkStatus();
}

void NodeServer::SyncLoop() {
  SetThreadLogRoute(&log_route_);
  // The token of the last batch applied, for the connection it came on: the next poll on it
  // acknowledges that batch (the master sends unacknowledged records again).
  std::shared_ptr<transport::RpcClient> acked_on;
  uint64_t acked = 0;
  while (true) {
    std::shared_ptr<transport::RpcClient> m;
    {
      granary::MutexLock lock(&mu_);
      if (stopping_) break;
      m = sync_master_;
    }
    if (m == nullptr || m->broken()) {
      SleepFor(50);
      continue;
    }
    if (m != acked_on) {
      acked_on = m;
      acked = 0;
    }
    auto rep = m->Invoke<proto::InventorySyncRequest, proto::InventorySyncReply>(
        proto::MsgType::kInventorySync, proto::InventorySyncRequest{kSyncWaitMs, acked},
        absl::Milliseconds(kSyncWaitMs) + kRpcTimeout);
    if (!rep.ok()) {
      // The session thread notices a broken connection and reconnects; records of the session
      // that broke are moot (its master dropped these segments, or is gone).
      LOG_DEBUG << "inventory poll failed: " << rep.status();
      // NOT_LEADER: the master lost the lead, or its reply carried a deposed epoch.
      if (m->broken() || ErrorReasonOf(rep.status()) == ErrorReason::kNotLeader) {
        granary::MutexLock lock(&mu_);
        if (sync_master_ == m) master_lost_ = true;
      }
      SleepFor(50);
      continue;
    }
    uint64_t applied = 0;
    for (const proto::InventoryRecord& r : rep->records) {
      std::optional<size_t> index = service_->IndexOf(r.segment_id);
      if (index.has_value() && inventory_->Apply(*index, r)) ++applied;
    }
    records_applied_->Inc(applied);
    if (!rep->records.empty()) inventory_entries_->Set(static_cast<double>(inventory_->size()));
    if (rep->token != 0) acked = rep->token;
  }
}

void NodeServer::SleepUntilMasterMoves(int64_t ms) {
  if (etcd_ == nullptr) {
    SleepFor(ms);
    return;
  }
  // With an etcd:// master a failed connect usually means the leader is gone and another is
  // being elected: the back-off must not keep this node away once the new one is published
  // (seen: a node still in a 3 s wait while the new leader refused every put for want of a
  // mounted segment). So the wait is cut into slices, and ends at once when master_view names
  // another address than the one this node last tried.
  constexpr int64_t kSliceMs = 100;
  const std::string tried = last_master_address_;
  for (int64_t slept = 0; slept < ms; slept += kSliceMs) {
    SleepFor(std::min(kSliceMs, ms - slept));
    {
      granary::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    absl::StatusOr<etcd::MasterView> view = etcd::ReadMasterView(etcd_.get(), options_.cluster_id);
    if (view.ok() && !tried.empty() && view->rpc != tried) return;
  }
}

absl::StatusOr<std::string> NodeServer::ResolveMaster() {
  if (etcd_ == nullptr) return options_.master;
  GRANARY_ASSIGN_OR_RETURN(etcd::MasterView view,
                           etcd::ReadMasterView(etcd_.get(), options_.cluster_id));
  // A view older than one this node has seen is stale (etcd answers in order, so only a lagging
  // endpoint serves one): wait for the current view.
  GRANARY_RETURN_IF_ERROR(epochs_.Accept(view.epoch, absl::StrCat("master_view (", view.rpc, ")")));
  highest_epoch_->store(epochs_.highest());
  return view.rpc;
}

void NodeServer::Run() {
  SetThreadLogRoute(&log_route_);
  sync_ = std::thread([this] { SyncLoop(); });
  Backoff backoff(100, options_.reconnect_backoff_max_ms);
  while (true) {
    {
      granary::MutexLock lock(&mu_);
      if (stopping_) break;
    }
    if (!master_ || master_->broken()) {
      connected_->Set(0);
      absl::Status st = ConnectAndMount();
      if (!st.ok()) {
        connect_failures_->Inc();
        const int64_t wait = backoff.NextMs();
        if (backoff.failures() == 1) {
          LOG_WARN << "cannot register with master " << options_.master << ": " << st
                   << "; retrying with back-off (up to " << options_.reconnect_backoff_max_ms
                   << " ms apart)";
        }
        master_.reset();
        SleepUntilMasterMoves(wait);
        continue;
      }
      backoff.Reset();
      connected_->Set(1);
    }
    {
      // Until the next heartbeat, or the sync thread saw the connection break.
      granary::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(this, &NodeServer::StoppingOrMasterLost),
                           absl::Milliseconds(heartbeat_ms_));
      master_lost_ = false;
    }
    if (master_ && !master_->broken()) {
      auto hb = master_->Invoke<proto::HeartbeatRequest, proto::HeartbeatReply>(
          proto::MsgType::kHeartbeat, MakeHeartbeat(), kRpcTimeout);
      if (!hb.ok()) {
        LOG_WARN << "heartbeat to master failed: " << hb.status() << "; reconnecting";
        master_.reset();
      }
    }
  }
  if (sync_.joinable()) sync_.join();
  UnmountAll();
  connected_->Set(0);
}

proto::HeartbeatRequest NodeServer::MakeHeartbeat() const {
  proto::HeartbeatRequest req;
  if (cgroup_ == nullptr) return req;
  absl::StatusOr<CgroupFigures> f = cgroup_->Read();
  if (!f.ok()) {
    LOG_DEBUG << "cgroup figures for the heartbeat: " << f.status();
    return req;
  }
  req.has_cgroup = true;
  req.cgroup = proto::NodeCgroupReport{
      cgroup_->dir(), cgroup_->version_name(), f->limit, f->effective_limit, f->usage,
      f->peak,        f->limit_hits,           f->oom,   f->oom_kill};
  return req;
}

void NodeServer::UnmountAll() {
  if (!master_ || master_->broken()) return;
  for (uint64_t id : service_->TakeMounted()) {
    auto rep = master_->Invoke<proto::UnmountSegmentRequest, proto::StatusReply>(
        proto::MsgType::kUnmountSegment, proto::UnmountSegmentRequest{id}, absl::Seconds(2));
    if (rep.ok()) {
      LOG_INFO << "unmounted segment " << id;
    } else {
      LOG_WARN << "unmount of segment " << id << " failed: " << rep.status();
    }
  }
}

void NodeServer::Shutdown() {
  granary::MutexLock lock(&mu_);
  stopping_ = true;
}

}  // namespace granary::node
