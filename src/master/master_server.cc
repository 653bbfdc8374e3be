#include "master/master_server.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace granary::master {

namespace {
template <typename Req>
absl::StatusOr<Req> Body(const proto::FrameView& f) {
  return proto::DecodeBody<Req>(f.body);
}
}  // namespace

absl::StatusOr<std::unique_ptr<MasterServer>> MasterServer::Create(const MasterOptions& options) {
  absl::Status st = options.Validate();
  if (!st.ok()) return st;
  std::unique_ptr<MasterServer> s(new MasterServer());
  s->options_ = options;
  s->service_ = std::make_unique<MasterService>(options, SystemClock::Default(), &s->metrics_);
  MasterService* svc = s->service_.get();
  auto tenants = tenant::TenantManager::Create(options, svc->ledger(),
                                               [svc] { return svc->capacity(); });
  if (!tenants.ok()) return tenants.status();
  s->tenants_ = std::move(*tenants);
  s->bad_requests_ = s->metrics_.Counter("granary_master_bad_requests_total",
                                         "Requests refused as malformed or unknown");
  auto ctx = transport::Context::Create("granary_master");
  if (!ctx.ok()) return ctx.status();
  s->ctx_ = std::move(*ctx);
  auto worker = transport::Worker::Create(s->ctx_.get(), "master", &s->metrics_);
  if (!worker.ok()) return worker.status();
  s->worker_ = std::move(*worker);
  transport::RpcServer::Callbacks cb;
  MasterServer* raw = s.get();
  cb.on_request = [raw](transport::RpcServer::ConnId c, const proto::FrameView& f) {
    return raw->Dispatch(c, f);
  };
  cb.on_disconnect = [raw](transport::RpcServer::ConnId c) { raw->service_->SessionClosed(c); };
  auto rpc = transport::RpcServer::Create(s->worker_.get(), options.rpc_port, std::move(cb));
  if (!rpc.ok()) return rpc.status();
  s->rpc_ = std::move(*rpc);
  auto http = AdminHttp::Create(options.metrics_host, options.metrics_port, s->service_.get(),
                                s->tenants_.get(), &s->metrics_,
                                [raw] { return raw->active_.load(); });
  if (!http.ok()) return http.status();
  s->http_ = std::move(*http);
  s->ticker_ = std::thread([raw] { raw->TickLoop(); });
  LOG_INFO << "granary_master up: rpc port " << s->rpc_port() << ", http "
           << options.metrics_host << ":" << s->http_port();
  return s;
}

MasterServer::~MasterServer() {
  Shutdown();
  if (ticker_.joinable()) ticker_.join();
  http_.reset();
  rpc_.reset();
  tenants_.reset();
  worker_.reset();
  ctx_.reset();
}

void MasterServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  if (!stopped_.HasBeenNotified()) stopped_.Notify();
}

void MasterServer::TickLoop() {
  while (!stopping_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.tick_ms));
    for (SessionId dead : service_->Tick()) rpc_->Disconnect(dead);
  }
}

std::optional<std::string> MasterServer::Dispatch(transport::RpcServer::ConnId conn,
                                                  const proto::FrameView& f) {
  using proto::MsgType;
  const uint16_t reply_type = f.header.type | proto::kReplyBit;
  const uint64_t id = f.header.request_id;
  auto fail = [&](const absl::Status& st) {
    bad_requests_->Inc();
    LOG_DEBUG << "bad " << proto::MsgTypeName(f.header.type) << " request: " << st;
    return proto::EncodeFrame(reply_type, id, proto::StatusReply{proto::WireStatus::From(st)});
  };
#define GRANARY_HANDLE(REQ, CALL)                      \
  {                                                    \
    auto req = Body<REQ>(f);                           \
    if (!req.ok()) return fail(req.status());          \
    return proto::EncodeFrame(reply_type, id, CALL);   \
  }
  switch (static_cast<MsgType>(f.header.type)) {
    case MsgType::kHello:
      GRANARY_HANDLE(proto::HelloRequest, service_->Hello(conn, *req));
    case MsgType::kHeartbeat:
      GRANARY_HANDLE(proto::HeartbeatRequest, service_->Heartbeat(conn));
    case MsgType::kMountSegment:
      GRANARY_HANDLE(proto::MountSegmentRequest, service_->MountSegment(conn, *req));
    case MsgType::kUnmountSegment:
      GRANARY_HANDLE(proto::UnmountSegmentRequest, service_->UnmountSegment(conn, *req));
    case MsgType::kPutStart:
      GRANARY_HANDLE(proto::PutStartRequest, service_->PutStart(conn, *req));
    case MsgType::kPutEnd:
      GRANARY_HANDLE(proto::KeyGenRequest, service_->PutEnd(conn, *req));
    case MsgType::kPutRevoke:
      GRANARY_HANDLE(proto::KeyGenRequest, service_->PutRevoke(conn, *req));
    case MsgType::kGet:
      GRANARY_HANDLE(proto::KeysRequest, service_->Get(conn, *req));
    case MsgType::kGetEnd:
      GRANARY_HANDLE(proto::KeyGenRequest, service_->GetEnd(conn, *req));
    case MsgType::kExist:
      GRANARY_HANDLE(proto::KeysRequest, service_->Exist(conn, *req));
    case MsgType::kRemove:
      GRANARY_HANDLE(proto::KeysRequest, service_->Remove(conn, *req));
    case MsgType::kList:
      GRANARY_HANDLE(proto::ListRequest, service_->List(conn, *req));
    case MsgType::kSegments:
      GRANARY_HANDLE(proto::SegmentsRequest, service_->Segments(conn));
    case MsgType::kCopyStart:
      GRANARY_HANDLE(proto::CopyStartRequest, service_->CopyStart(conn, *req, false));
    case MsgType::kMoveStart:
      GRANARY_HANDLE(proto::CopyStartRequest, service_->CopyStart(conn, *req, true));
    case MsgType::kCopyEnd:
      GRANARY_HANDLE(proto::CopyEndRequest, service_->CopyEnd(conn, *req, false));
    case MsgType::kMoveEnd:
      GRANARY_HANDLE(proto::CopyEndRequest, service_->CopyEnd(conn, *req, true));
    case MsgType::kCopyRevoke:
    case MsgType::kMoveRevoke:
      GRANARY_HANDLE(proto::CopyEndRequest, service_->CopyRevoke(conn, *req));
    default:
      break;
  }
#undef GRANARY_HANDLE
  return fail(absl::InvalidArgumentError(
      absl::StrCat("unknown message type ", f.header.type & ~proto::kReplyBit)));
}

}  // namespace granary::master
