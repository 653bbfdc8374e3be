#include "transport/rpc_server.h"

#include <netinet/in.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "proto/messages.h"

namespace granary::transport {

absl::StatusOr<std::unique_ptr<RpcServer>> RpcServer::Create(Worker* worker, uint16_t port,
                                                             Callbacks callbacks) {
  std::unique_ptr<RpcServer> s(new RpcServer(worker, std::move(callbacks)));
  absl::Status st = worker->Run([&]() -> absl::Status {
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = INADDR_ANY;
    addr.sin_port = htons(port);
    ucp_listener_params_t p = {};
    p.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    p.sockaddr.addrlen = sizeof(addr);
    p.conn_handler.cb = &RpcServer::OnConnRequest;
    p.conn_handler.arg = s.get();
    ucs_status_t us = ucp_listener_create(worker->handle(), &p, &s->listener_);
    if (us != UCS_OK) return UcsError(us, absl::StrCat("listening on port ", port));
    ucp_listener_attr_t attr = {};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    us = ucp_listener_query(s->listener_, &attr);
    if (us != UCS_OK) return UcsError(us, "querying the listener address");
    s->port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
    worker->SetRequestHandler(
        [raw = s.get()](ucp_ep_h ep, absl::string_view frame) { raw->OnFrame(ep, frame); });
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  return s;
}

RpcServer::~RpcServer() {
  worker_->Run([this] {
    // Closures already queued behind this one (an endpoint error seen during the last
    // progress call, a late Reply) find the server gone and do nothing.
    *alive_ = false;
    worker_->SetRequestHandler(nullptr);
    if (listener_ != nullptr) ucp_listener_destroy(listener_);
    for (auto& [id, ep] : conns_) {
      ep->on_error = nullptr;
      worker_->Close(ep);
    }
    conns_.clear();
    by_ep_.clear();
  });
}

void RpcServer::OnConnRequest(ucp_conn_request_h req, void* arg) {
  auto* self = static_cast<RpcServer*>(arg);
  auto ep = self->worker_->Accept(req);
  if (!ep.ok()) {
    // ucp_ep_create consumed the request even though it failed: do not reject it again.
    LOG_WARN << "refused a connection: " << ep.status();
    return;
  }
  ConnId id = self->next_id_++;
  (*ep)->on_error = [self, id, alive = self->alive_](ucs_status_t) {
    // Inside a UCX callback: defer the cleanup.
    self->worker_->Post([self, id, alive] {
      if (*alive) self->DropConn(id);
    });
  };
  self->conns_[id] = *ep;
  self->by_ep_[(*ep)->ep] = id;
  LOG_DEBUG << "accepted connection " << id << " from " << (*ep)->peer;
}

void RpcServer::DropConn(ConnId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  std::shared_ptr<Endpoint> ep = it->second;
  conns_.erase(it);
  by_ep_.erase(ep->ep);
  worker_->Close(ep);
  if (callbacks_.on_disconnect) callbacks_.on_disconnect(id);
}

std::string RpcServer::PeerOf(ConnId conn) const {
  auto it = conns_.find(conn);
  return it == conns_.end() ? "unknown" : it->second->peer;
}

void RpcServer::OnFrame(ucp_ep_h reply_ep, absl::string_view data) {
  auto it = by_ep_.find(reply_ep);
  if (it == by_ep_.end()) {
    LOG_WARN << "request frame from an unknown endpoint dropped";
    return;
  }
  ConnId id = it->second;
  Endpoint* ep = conns_[id].get();
  worker_->NoteTransport(ep);
  auto frame = proto::DecodeFrame(data);
  std::optional<std::string> reply;
  if (!frame.ok()) {
    // Answer what can be answered: the header's request id and type, if present.
    uint16_t type = 0;
    uint64_t request_id = 0;
    if (data.size() >= proto::kFrameHeaderSize) {
      std::memcpy(&type, data.data() + 6, 2);
      std::memcpy(&request_id, data.data() + 12, 8);
    }
    LOG_WARN << "malformed frame from " << ep->peer << ": " << frame.status();
    proto::StatusReply r{proto::WireStatus::From(frame.status())};
    reply = proto::EncodeFrame(static_cast<uint16_t>(type | proto::kReplyBit), request_id, r);
  } else {
    reply = callbacks_.on_request(id, *frame);
  }
  if (reply.has_value()) {
    absl::Status st = worker_->SendFrame(ep, std::move(*reply), false);
    if (!st.ok()) LOG_DEBUG << "reply dropped: " << st;
  }
}

void RpcServer::Reply(ConnId conn, std::string frame) {
  worker_->Post([this, conn, f = std::move(frame), alive = alive_]() mutable {
    if (!*alive) return;
    auto it = conns_.find(conn);
    if (it == conns_.end()) return;
    absl::Status st = worker_->SendFrame(it->second.get(), std::move(f), false);
    if (!st.ok()) LOG_DEBUG << "reply dropped: " << st;
  });
}

void RpcServer::Disconnect(ConnId conn) {
  worker_->Post([this, conn, alive = alive_] {
    if (*alive) DropConn(conn);
  });
}

}  // namespace granary::transport
