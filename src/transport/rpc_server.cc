#include "transport/rpc_server.h"

#include <sys/random.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "proto/messages.h"
#include "proto/transcode.h"

namespace granary::transport {
namespace {

// A nonce another process cannot guess: it stands for the connection until attached.
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
  ListenOptions listen;
  listen.port = port;
  return Create(worker, listen, std::move(callbacks));
}

absl::StatusOr<std::unique_ptr<RpcServer>> RpcServer::Create(Worker* worker,
                                                             const ListenOptions& listen,
                                                             Callbacks callbacks) {
  std::unique_ptr<RpcServer> s(new RpcServer(worker, std::move(callbacks)));
  GRANARY_ASSIGN_OR_RETURN(s->worker_address_, worker->Address());
  worker->Run([raw = s.get()] {
    raw->worker_->SetRequestHandler(
        [raw](ucp_ep_h ep, absl::string_view frame) { raw->OnFrame(ep, frame); });
  });
  RpcListener::Options lo;
  lo.host = listen.host;
  lo.port = listen.port;
  lo.metrics = listen.metrics;
  lo.name = listen.name;
  RpcListener::Callbacks lc;
  RpcServer* raw = s.get();
  lc.on_handshake = [raw](RpcListener::LinkId link, const proto::HandshakeRequest& req,
                          const std::string& peer) { return raw->OnHandshake(link, req, peer); };
  lc.on_closed = [raw](RpcListener::LinkId link) { raw->OnLinkClosed(link); };
  auto listener = RpcListener::Create(std::move(lo), std::move(lc));
  if (!listener.ok()) {
    worker->Run([&] { worker->SetRequestHandler(nullptr); });
    return listener.status();
  }
  s->port_ = (*listener)->port();
  // Set on the progress thread, which reads it (DropConn, OnAttach).
  worker->Run([&] { s->listener_ = std::move(*listener); });
  return s;
}

RpcServer::~RpcServer() {
  worker_->Run([this] {
    // Closures already queued behind this one (an endpoint error seen during the last
    // progress call, a closed link, a late Reply) find the server gone and do nothing.
    *alive_ = false;
    worker_->SetRequestHandler(nullptr);
    // Stops the listener's thread: no handshake or link callback after this.
    listener_.reset();
    for (auto& [id, c] : conns_) {
      c.ep->on_error = nullptr;
      worker_->Close(c.ep);
    }
    conns_.clear();
    by_link_.clear();
    by_ep_.clear();
  });
}

size_t RpcServer::open_sockets() const { return listener_ ? listener_->open_sockets() : 0; }

proto::HandshakeReply RpcServer::OnHandshake(RpcListener::LinkId link,
                                             const proto::HandshakeRequest& req,
                                             const std::string& peer) {
  proto::HandshakeReply rep;
  rep.nonce = NewNonce();
  rep.host_id = common::HostId();
  rep.worker_address = worker_address_;
  const bool tcp_only = !shm_enabled_ || (req.flags & proto::kHandshakeFlagTcpOnly) != 0;
  if (tcp_only) rep.flags = proto::kHandshakeFlagTcpOnly;
  rep.version = proto::NegotiateVersion(req.version);
  if (rep.version != proto::kProtocolVersion) {
    GRANARY_LOG_INFO << peer << " speaks protocol " << req.version << ": its connection uses "
                     << rep.version;
  }
  granary::common::MutexLock lock(&offers_mu_);
  offers_[rep.nonce] = Offer{link, tcp_only, peer, rep.version};
  return rep;
}

void RpcServer::OnLinkClosed(RpcListener::LinkId link) {
  // The listener's thread: the connection (or the offer it never attached) goes on the
  // progress thread, after anything already queued there.
  worker_->Post([this, link, alive = alive_] {
    if (!*alive) return;
    if (auto it = by_link_.find(link); it != by_link_.end()) {
      DropConn(it->second, /*link_gone=*/true);
      return;
    }
    granary::common::MutexLock lock(&offers_mu_);
    absl::erase_if(offers_, [link](const auto& kv) { return kv.second.link == link; });
  });
}

void RpcServer::DropConn(ConnId id, bool link_gone) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn c = std::move(it->second);
  conns_.erase(it);
  // A handle UCX freed and reused may already route another connection: leave that one be.
  if (auto r = by_ep_.find(c.route_key); r != by_ep_.end() && r->second == id) by_ep_.erase(r);
  by_link_.erase(c.link);
  c.ep->on_error = nullptr;
  worker_->Close(c.ep);
  if (!link_gone && listener_) listener_->CloseLink(c.link);
  if (callbacks_.on_disconnect) callbacks_.on_disconnect(id);
}

std::string RpcServer::PeerOf(ConnId conn) const {
  auto it = conns_.find(conn);
  return it == conns_.end() ? "unknown" : it->second.ep->peer;
}

void RpcServer::OnAttach(ucp_ep_h reply_ep, const proto::FrameView& f, uint16_t version) {
  proto::StatusReply rep;
  auto req = proto::DecodeBody<proto::AttachRequest>(f.body);
  std::optional<Offer> offer;
  // A malformed attach leaves the offer for a well-formed one.
  if (req.ok() && !req->worker_address.empty() && reply_ep != nullptr) {
    granary::common::MutexLock lock(&offers_mu_);
    if (auto o = offers_.find(req->nonce); o != offers_.end()) {
      offer = std::move(o->second);
      offers_.erase(o);
    }
  }
  std::shared_ptr<Endpoint> own;
  if (!req.ok()) {
    rep.status = proto::WireStatus::From(req.status());
  } else if (req->worker_address.empty() || reply_ep == nullptr) {
    rep.status = proto::WireStatus::From(absl::InvalidArgumentError(
        "Attach carries no worker address to answer on, or came without a reply endpoint"));
  } else if (!offer.has_value()) {
    rep.status = proto::WireStatus::From(absl::PermissionDeniedError(
        absl::StrCat("Attach: nonce ", req->nonce, " was not offered, or was used")));
  } else {
    auto ep = worker_->ConnectWorker(req->worker_address, offer->peer,
                                     /*peer_failure_handling=*/offer->tcp_only);
    if (!ep.ok()) {
      rep.status = proto::WireStatus::From(ep.status());
    } else {
      own = *ep;
      const ConnId id = next_id_++;
      own->on_error = [this, id, alive = alive_](ucs_status_t) {
        // Inside a UCX callback: defer the cleanup.
        worker_->Post([this, id, alive] {
          if (*alive) DropConn(id);
        });
      };
      conns_[id] = Conn{own, reply_ep, offer->link, offer->version};
      by_link_[offer->link] = id;
      by_ep_[reply_ep] = id;
      GRANARY_LOG_DEBUG << "accepted connection " << id << " from " << offer->peer;
    }
  }
  std::string frame = proto::EncodeFrame(static_cast<uint16_t>(f.header.type | proto::kReplyBit),
                                         f.header.request_id, rep);
  // A refusal goes out on the handle UCX made for the unknown peer: UCX owns it, and it lives
  // at least as long as this frame's callback. It is not kept.
  Endpoint refused;
  refused.ep = reply_ep;
  refused.peer = "an unattached endpoint";
  if (own == nullptr) {
    GRANARY_LOG_WARN << "refused an Attach: " << rep.status.message;
    // Its link (if any) has no connection to end: close it so the client hears at once.
    if (offer.has_value() && listener_) listener_->CloseLink(offer->link);
  }
  Endpoint* out = own != nullptr ? own.get() : &refused;
  if (out->ep != nullptr) SendReply(out, std::move(frame), version);
}

void RpcServer::SendReply(Endpoint* ep, std::string frame, uint16_t version) {
  if (version != proto::kProtocolVersion) {
    absl::StatusOr<std::string> down = proto::TranscodeFrame(frame, version);
    if (down.ok()) {
      frame = std::move(*down);
    } else {
      // A reply of ours that the peer's version cannot carry: a bug here, answered as one.
      GRANARY_LOG_ERROR << "reply to " << ep->peer << " not sent in protocol " << version << ": "
                        << down.status();
      auto f = proto::DecodeFrame(frame);
      const proto::StatusReply r{proto::WireStatus::From(absl::InternalError(absl::StrCat(
          "the reply could not be put in protocol ", version, ": ", down.status().message())))};
      frame = proto::EncodeFrame(f.ok() ? f->header.type : 0, f.ok() ? f->header.request_id : 0, r,
                                 version);
    }
  }
  absl::Status st = worker_->SendFrame(ep, std::move(frame), false);
  if (!st.ok()) GRANARY_LOG_DEBUG << "reply dropped: " << st;
}

void RpcServer::OnFrame(ucp_ep_h reply_ep, absl::string_view data) {
  auto it = by_ep_.find(reply_ep);
  auto frame = proto::DecodeFrame(data);
  // An older peer's frame, in this build's version: what the callbacks see.
  const uint16_t version = frame.ok() ? frame->header.version : proto::kProtocolVersion;
  std::string upgraded;
  if (frame.ok() && version != proto::kProtocolVersion) {
    absl::StatusOr<std::string> up = proto::TranscodeFrame(data, proto::kProtocolVersion);
    if (up.ok()) {
      upgraded = std::move(*up);
      frame = proto::DecodeFrame(upgraded);
    } else {
      frame = up.status();
    }
  }
  if (it == by_ep_.end()) {
    // Only kAttach may come on an endpoint not known yet.
    if (frame.ok() && frame->header.type == static_cast<uint16_t>(proto::MsgType::kAttach)) {
      OnAttach(reply_ep, *frame, version);
      return;
    }
    GRANARY_LOG_WARN << "request frame from an unknown endpoint dropped";
    return;
  }
  const ConnId id = it->second;
  Endpoint* ep = conns_[id].ep.get();
  worker_->NoteTransport(ep);
  std::optional<std::string> reply;
  if (!frame.ok()) {
    // Answer what can be answered: the header's request id and type, if present.
    uint16_t type = 0;
    uint64_t request_id = 0;
    if (data.size() >= proto::kFrameHeaderSize) {
      std::memcpy(&type, data.data() + 6, 2);
      std::memcpy(&request_id, data.data() + 12, 8);
    }
    GRANARY_LOG_WARN << "malformed frame from " << ep->peer << ": " << frame.status();
    proto::StatusReply r{proto::WireStatus::From(frame.status())};
    reply = proto::EncodeFrame(static_cast<uint16_t>(type | proto::kReplyBit), request_id, r);
  } else if (frame->header.type == static_cast<uint16_t>(proto::MsgType::kAttach)) {
    proto::StatusReply r{proto::WireStatus::From(
        absl::FailedPreconditionError("this connection is attached already"))};
    reply = proto::EncodeFrame(static_cast<uint16_t>(frame->header.type | proto::kReplyBit),
                               frame->header.request_id, r);
  } else {
    reply = callbacks_.on_request(id, *frame);
  }
  if (reply.has_value()) SendReply(ep, std::move(*reply), conns_[id].version);
}

void RpcServer::Reply(ConnId conn, std::string frame) {
  worker_->Post([this, conn, f = std::move(frame), alive = alive_]() mutable {
    if (!*alive) return;
    auto it = conns_.find(conn);
    if (it == conns_.end()) return;
    SendReply(it->second.ep.get(), std::move(f), it->second.version);
  });
}

void RpcServer::Disconnect(ConnId conn) {
  worker_->Post([this, conn, alive = alive_] {
    if (*alive) DropConn(conn);
  });
}

}  // namespace granary::transport
