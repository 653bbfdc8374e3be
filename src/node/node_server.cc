#include "node/node_server.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "device/device_backend.h"
#include "node/segment_file_state.h"
#include "proto/messages.h"

namespace granary::node {

namespace {

common::HttpServerOptions HttpOptions(common::MetricsRegistry* metrics) {
  common::HttpServerOptions o;
  o.metrics = metrics;
  return o;
}

}  // namespace

NodeServer::NodeServer() : http_(HttpOptions(&metrics_)) {}

absl::StatusOr<std::unique_ptr<NodeServer>> NodeServer::Create(const NodeOptions& options) {
  GRANARY_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<NodeServer> n(new NodeServer());
  n->options_ = options;
  n->log_route_.level = options.log_level;
  common::ScopedLogRoute route(&n->log_route_);
  n->node_id_ = common::RandomId();  // or the segment file's (below)
  n->counters_ = std::make_unique<NodeMetrics>(&n->metrics_);
  GRANARY_ASSIGN_OR_RETURN(n->segments_, NodeSegments::Create(options, &n->metrics_));
  const transport::NetDeviceChoice& nic = n->segments_->nic();
  std::vector<std::pair<std::string, std::string>> ucx;
  if (!nic.device.empty()) ucx.emplace_back("NET_DEVICES", nic.device);
  GRANARY_ASSIGN_OR_RETURN(n->ctx_, transport::Context::Create("granary_node", ucx));
  transport::LogNetDeviceChoice(nic, *n->ctx_, &n->metrics_, "granary_node_net_device");
  GRANARY_ASSIGN_OR_RETURN(n->worker_,
                           transport::Worker::Create(n->ctx_.get(), "node", &n->metrics_));
  n->worker_->Post([r = &n->log_route_] { common::SetThreadLogRoute(r); });

  // Allocate and register up front, so the memory is charged at start, not by surprise later.
  std::vector<SegmentSpan> spans;
  if (options.host_segment_size > 0) {
    GRANARY_RETURN_IF_ERROR(
        n->segments_->AddHost(n->ctx_.get(), options.host_segment_name, &spans));
  }
  if (options.gpu_segment_size > 0) {
    const std::vector<int> devices =
        options.gpu_devices.empty() ? std::vector<int>{0} : options.gpu_devices;
    for (int device : devices) {
      GRANARY_RETURN_IF_ERROR(n->segments_->AddGpu(n->ctx_.get(), device, &spans));
    }
  }
  for (size_t i = 0; i < options.disk_paths.size(); ++i) {
    GRANARY_RETURN_IF_ERROR(n->segments_->AddDisk(i, &spans));
  }
  NodeMetrics::RecordSegments(&n->metrics_, spans);
  n->service_ = std::make_unique<NodeService>(std::move(spans));
  n->inventory_ = std::make_unique<NodeInventory>(&n->service_->segments());
  // A disk tier's records are read through the tier, as headers for the inventory's report.
  NodeSegments* segments = n->segments_.get();
  n->inventory_->SetDiskHeaderReader([segments](size_t index, const uint64_t* offsets, size_t n,
                                                proto::AllocHeader* headers, bool* ok) {
    DiskTier* tier = segments->disk(index);
    if (tier == nullptr) return;
    std::vector<absl::StatusOr<DiskRecordMeta>> metas;
    tier->store().PeekMany(absl::MakeConstSpan(offsets, n), &metas);
    for (size_t i = 0; i < n; ++i) {
      if (!metas[i].ok()) continue;
      headers[i] = proto::AllocHeader{};
      headers[i].generation = metas[i]->generation;
      headers[i].key_hash = metas[i]->key_hash;
      headers[i].value_length = metas[i]->value_length;
      ok[i] = true;
    }
  });
  bool readopted = false;
  // The node's id and inventory journal live beside its segment file, or, without one, beside
  // its first disk tier's file: what a restarted node re-adopts.
  const std::string state_path = !options.segment_file.empty() ? options.segment_file
                                 : !options.disk_paths.empty()
                                     ? options.disk_paths[0] + "/granary-node"
                                     : std::string();
  if (!state_path.empty()) {
    const bool reused = n->segments_->reused_file() || n->segments_->reused_disk();
    GRANARY_ASSIGN_OR_RETURN(SegmentFileState state, OpenSegmentFileState(state_path, reused));
    n->node_id_ = state.node_id;
    const uint64_t torn = state.replay.torn_bytes;
    const size_t taken = n->inventory_->Adopt(std::move(state.journal), state.replay);
    n->counters_->readopted_entries->Set(static_cast<double>(taken));
    readopted = reused;
    if (readopted) {
      GRANARY_LOG_INFO << "'" << state_path << "': re-adopting " << taken
                       << " object(s) from its journal (" << state.replay.records
                       << " record(s) read"
                       << (torn > 0 ? absl::StrCat(", a torn tail of ", torn, " bytes cut off")
                                    : "")
                       << "); each is checked against its header before it is reported";
    }
  }
  GRANARY_RETURN_IF_ERROR(n->StartRpc());
  GRANARY_ASSIGN_OR_RETURN(n->worker_address_, n->worker_->Address());
  MasterSession::Parts session;
  session.options = &n->options_;
  session.worker = n->worker_.get();
  session.service = n->service_.get();
  session.inventory = n->inventory_.get();
  session.metrics = n->counters_.get();
  session.log_route = &n->log_route_;
  session.node_id = n->node_id_;
  session.worker_address = n->worker_address_;
  session.listen_port = n->listen_port();
  session.readopted = readopted;
  GRANARY_ASSIGN_OR_RETURN(n->session_, MasterSession::Create(std::move(session)));
  n->StartHttp();
  if (options.serve_http) {
    GRANARY_RETURN_IF_ERROR(n->http_.Start(options.metrics_host, options.metrics_port));
  }
  GRANARY_LOG_INFO << "granary_node " << n->node_id_ << " listening on port " << n->listen_port()
                   << ", http port " << n->http_port();
  return n;
}

absl::Status NodeServer::StartRpc() {
  // Clients connect here for the requests DataHandlers serves (Fetch, Push, Read, Write);
  // one-sided reads and writes need no request.
  rma_ = std::make_unique<transport::RmaEngine>(worker_.get());
  rma_->set_refusal_counter(counters_->peer_refusals);
  transport::RmaEngine* rma = rma_.get();
  watchdog_ = std::make_unique<TransferWatchdog>(
      [rma](const std::vector<std::string>& peers) { rma->MarkUnreachable(peers); });
  if (options_.gpu_segment_size > 0) {
    GRANARY_ASSIGN_OR_RETURN(
        bounce_, GpuBounce::Create(&device::ActiveRuntime(), ctx_.get(), rma, &metrics_));
  }
  DataHandlers::Parts parts;
  parts.service = service_.get();
  parts.segments = segments_.get();
  parts.rma = rma;
  parts.watchdog = watchdog_.get();
  parts.bounce = bounce_.get();
  parts.metrics = counters_.get();
  // Fetch and Push answers may come late: dropped once the node is going away.
  parts.reply = [this](transport::RpcServer::ConnId conn, std::string frame) {
    if (listener_) listener_->Reply(conn, std::move(frame));
  };
  handlers_ = std::make_unique<DataHandlers>(std::move(parts));
  transport::RpcServer::Callbacks cb;
  DataHandlers* handlers = handlers_.get();
  cb.on_request = [handlers](transport::RpcServer::ConnId c, const proto::FrameView& f) {
    return handlers->Dispatch(c, f);
  };
  // A client that pushed to this node is gone: drop the endpoint and rkeys made for it.
  cb.on_disconnect = [handlers](transport::RpcServer::ConnId c) { handlers->Disconnected(c); };
  GRANARY_ASSIGN_OR_RETURN(
      listener_, transport::RpcServer::Create(
                     worker_.get(), {options_.rpc_host, options_.rpc_port, &metrics_, "node rpc"},
                     std::move(cb)));
  return absl::OkStatus();
}

void NodeServer::StartHttp() {
  http_.server().Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.Render(), "text/plain; version=0.0.4");
  });
  http_.server().Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool up = connected();
    res.status = up ? 200 : 503;
    res.set_content(up ? "{\"status\":\"ok\"}" : "{\"status\":\"master not connected\"}",
                    "application/json");
  });
}

NodeServer::~NodeServer() {
  common::ScopedLogRoute route(&log_route_);  // closing connections may log
  session_.reset();                       // stops and joins the sync thread, drops the connections
  if (watchdog_) watchdog_->Stop();       // no deadline fires (and uses rma_) from here on
  if (segments_) segments_->StopDisks();  // their last answers go out through listener_
  listener_.reset();
  if (bounce_) bounce_->Stop();  // no staged job uses rma_ from here on
  rma_.reset();
  watchdog_.reset();  // after rma_: a transfer it ends still reports to the watchdog
  bounce_.reset();    // its slots' registrations, before the context; before the GPU segments
  if (segments_) segments_->Release();
  worker_.reset();
  ctx_.reset();
}

}  // namespace granary::node
