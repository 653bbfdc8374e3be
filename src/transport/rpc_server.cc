#include "transport/rpc_server.h"

#include <netinet/in.h>
#include <sys/random.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "proto/messages.h"

namespace granary::transport {
namespace {

// A nonce another local process cannot guess: it stands for the connection until attached.
uint64_t NewNonce() {
  uint64_t n = 0;
  while (n == 0) {
    if (getrandom(&n, sizeof(n), 0) != static_cast<ssize_t>(sizeof(n))) n = 0;
  }
  return n;
}

}  // namespace

RpcServer::RpcServer(Worker* w, Callbacks cb)
    : worker_(w), callbacks_(std::move(cb)), shm_enabled_(ControlShmEnabled()) {}

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
  GRANARY_RETURN_IF_ERROR(st);
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
    for (auto& [id, link] : shm_eps_) worker_->Close(link.ep);
    conns_.clear();
    shm_eps_.clear();
    offers_.clear();
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
  self->by_ep_[(*ep)->ep] = Route{id, ep->get()};
  LOG_DEBUG << "accepted connection " << id << " from " << (*ep)->peer;
}

void RpcServer::DropConn(ConnId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  std::shared_ptr<Endpoint> ep = it->second;
  conns_.erase(it);
  EraseRoute(ep->ep, id);
  worker_->Close(ep);
  // The shared-memory endpoint goes with the connection: it cannot report the peer's loss.
  if (auto s = shm_eps_.find(id); s != shm_eps_.end()) {
    EraseRoute(s->second.route_key, id);
    worker_->Close(s->second.ep);
    shm_eps_.erase(s);
  }
  absl::erase_if(offers_, [id](const auto& kv) { return kv.second == id; });
  if (callbacks_.on_disconnect) callbacks_.on_disconnect(id);
}

std::string RpcServer::PeerOf(ConnId conn) const {
  auto it = conns_.find(conn);
  return it == conns_.end() ? "unknown" : it->second->peer;
}

void RpcServer::EraseRoute(ucp_ep_h key, ConnId conn) {
  // A handle UCX freed and reused may already route another connection: leave that one be.
  if (auto r = by_ep_.find(key); r != by_ep_.end() && r->second.conn == conn) by_ep_.erase(r);
}

Endpoint* RpcServer::ReplyEndpoint(ConnId conn) {
  if (auto s = shm_eps_.find(conn); s != shm_eps_.end()) return s->second.ep.get();
  auto it = conns_.find(conn);
  return it == conns_.end() ? nullptr : it->second.get();
}

bool RpcServer::OnShmFrame(ucp_ep_h reply_ep, ConnId conn, Endpoint* from,
                           const proto::FrameView& f) {
  const uint16_t type = f.header.type;
  const uint16_t reply_type = static_cast<uint16_t>(type | proto::kReplyBit);
  if (type == static_cast<uint16_t>(proto::MsgType::kShmOffer)) {
    // Offered on a connection's own endpoint only: on an unknown one it is dropped.
    if (from == nullptr) return false;
    proto::ShmOfferReply rep;
    if (!shm_enabled_) {
      rep.status = proto::WireStatus::From(absl::FailedPreconditionError(
          "this server keeps control connections on tcp (GRANARY_CONTROL_SHM=0)"));
    } else if (shm_eps_.contains(conn)) {
      rep.status = proto::WireStatus::From(
          absl::FailedPreconditionError("this connection already uses shared memory"));
    } else {
      auto addr = worker_->Address();
      if (!addr.ok()) {
        rep.status = proto::WireStatus::From(addr.status());
      } else {
        rep.nonce = NewNonce();
        offers_[rep.nonce] = conn;
        rep.host_id = HostId();
        rep.worker_address = std::move(*addr);
      }
    }
    absl::Status st =
        worker_->SendFrame(from, proto::EncodeFrame(reply_type, f.header.request_id, rep), false);
    if (!st.ok()) LOG_DEBUG << "reply dropped: " << st;
    return true;
  }
  if (type != static_cast<uint16_t>(proto::MsgType::kShmAttach)) return false;
  proto::StatusReply rep;
  auto req = proto::DecodeBody<proto::ShmAttachRequest>(f.body);
  // A known handle that routes to a connection's shared-memory link is not that connection's
  // tcp endpoint: either the same client attaching twice (its nonce is spent) or a handle UCX
  // freed and reused for a new peer. Both are judged by the nonce, as a new endpoint is.
  const bool via_shm_route =
      conn != 0 && shm_eps_.contains(conn) && shm_eps_[conn].ep.get() == from;
  ConnId joined = 0;
  if (!req.ok()) {
    rep.status = proto::WireStatus::From(req.status());
  } else if ((conn != 0 && !via_shm_route) || reply_ep == nullptr) {
    rep.status = proto::WireStatus::From(absl::FailedPreconditionError(
        "ShmAttach must come on a new worker-address endpoint, with a reply endpoint"));
  } else if (auto o = offers_.find(req->nonce); o == offers_.end()) {
    rep.status = proto::WireStatus::From(absl::PermissionDeniedError(
        absl::StrCat("ShmAttach: nonce ", req->nonce, " was not offered, or was used")));
  } else if (req->worker_address.empty()) {
    rep.status = proto::WireStatus::From(
        absl::InvalidArgumentError("ShmAttach carries no worker address to answer on"));
  } else {
    const ConnId offered = o->second;
    offers_.erase(o);
    const std::string peer = absl::StrCat(conns_[offered]->peer, " (shm)");
    // Shared-memory transports report no peer failure: the tcp endpoint does (DropConn).
    auto own = worker_->ConnectWorker(req->worker_address, peer, /*peer_failure_handling=*/false);
    if (!own.ok()) {
      rep.status = proto::WireStatus::From(own.status());
    } else {
      joined = offered;
      shm_eps_[joined] = ShmLink{*own, reply_ep};
      by_ep_[reply_ep] = Route{joined, own->get()};
      LOG_DEBUG << "connection " << joined << " from " << conns_[joined]->peer
                << " moved to shared memory";
    }
  }
  std::string frame = proto::EncodeFrame(reply_type, f.header.request_id, rep);
  // Not kept: UCX owns the endpoint it made for the unknown peer, and it lives at least as
  // long as this frame's callback.
  Endpoint refused;
  refused.ep = reply_ep;
  refused.peer = "an unattached endpoint";
  Endpoint* out = joined != 0                         ? shm_eps_[joined].ep.get()
                  : from != nullptr && !via_shm_route ? from
                                                      : &refused;
  absl::Status st;
  if (out->ep != nullptr) st = worker_->SendFrame(out, std::move(frame), false);
  if (!st.ok()) LOG_DEBUG << "reply dropped: " << st;
  return true;
}

void RpcServer::OnFrame(ucp_ep_h reply_ep, absl::string_view data) {
  auto it = by_ep_.find(reply_ep);
  if (it == by_ep_.end()) {
    // Only a kShmAttach may come on an endpoint not known yet.
    auto frame = proto::DecodeFrame(data);
    if (frame.ok() && OnShmFrame(reply_ep, 0, nullptr, *frame)) return;
    LOG_WARN << "request frame from an unknown endpoint dropped";
    return;
  }
  const ConnId id = it->second.conn;
  Endpoint* ep = it->second.ep;
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
  } else if (OnShmFrame(reply_ep, id, ep, *frame)) {
    return;
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
    Endpoint* ep = ReplyEndpoint(conn);
    if (ep == nullptr) return;
    absl::Status st = worker_->SendFrame(ep, std::move(f), false);
    if (!st.ok()) LOG_DEBUG << "reply dropped: " << st;
  });
}

void RpcServer::Disconnect(ConnId conn) {
  worker_->Post([this, conn, alive = alive_] {
    if (*alive) DropConn(conn);
  });
}

}  // namespace granary::transport
