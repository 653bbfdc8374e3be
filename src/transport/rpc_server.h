#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "proto/frame.h"
#include "proto/handshake.h"
#include "transport/rpc_listener.h"
#include "transport/worker.h"

namespace granary::transport {

// Serves control connections: accepts them on Granary's own listener (RpcListener, whose
// handshake is all a stranger's bytes ever reach) and dispatches their request frames, which
// travel on UCX endpoints between the two workers.
//
// A connection: the client's handshake carries its worker address; the reply carries this
// worker's address and a one-time nonce. The client connects an endpoint to this worker (UCX
// picks shared memory on one host, tcp or RDMA between hosts) and sends kAttach with the nonce
// as its first frame; the server connects its own endpoint back to the client's worker, and
// replies go out on that one. The listener's socket stays open as the connection's liveness
// link: UCX 1.13's shared-memory transports cannot report a dead peer, and a closed socket can.
// Either side closing it ends the connection. A client that asks for tcp only (its
// GRANARY_CONTROL_SHM=0, or a server on another host), or a server with GRANARY_CONTROL_SHM=0,
// gets endpoints with UCX peer-failure handling, which leaves shared memory out.
//
// Versions (docs/protocol.md): the handshake agrees on the lower of the two sides' newest
// protocols. Callbacks see every request in this build's version and answer in it; for a peer
// of an older one, this class transcodes requests up and replies down (proto::TranscodeFrame).
//
// Connection ids are never reused. Request callbacks run on the worker's progress thread;
// Reply and Disconnect may be called from any thread. Destroy before the Worker.
class RpcServer {
 public:
  using ConnId = uint64_t;
  struct Callbacks {
    // A decoded request. Return the reply frame, or nullopt to reply later with Reply().
    std::function<std::optional<std::string>(ConnId, const proto::FrameView&)> on_request;
    // The connection failed or was closed by the peer.
    std::function<void(ConnId)> on_disconnect;
  };
  struct ListenOptions {
    std::string host = "0.0.0.0";  // the interface the RPC port binds
    uint16_t port = 0;             // 0 picks a free port; port() tells which
    common::MetricsRegistry* metrics = nullptr;
    std::string name = "rpc";
  };
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RpcServer>> Create(
      Worker* worker, const ListenOptions& listen, Callbacks callbacks);
  // On every interface.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RpcServer>> Create(Worker* worker,
                                                                         uint16_t port,
                                                                         Callbacks callbacks);
  ~RpcServer();

  uint16_t port() const { return port_; }
  void Reply(ConnId conn, std::string frame);
  void Disconnect(ConnId conn);
  // The peer's address as the listener saw it ("host:port"); progress-thread only.
  std::string PeerOf(ConnId conn) const;
  // Sockets the listener holds open (links and handshakes in progress); any thread.
  size_t open_sockets() const;

 private:
  RpcServer(Worker* w, Callbacks cb);
  // The listener's thread: records the offer, answers with this worker's address.
  proto::HandshakeReply OnHandshake(RpcListener::LinkId link, const proto::HandshakeRequest& req,
                                    const std::string& peer);
  void OnLinkClosed(RpcListener::LinkId link);
  void OnFrame(ucp_ep_h reply_ep, absl::string_view frame);
  // kAttach on an endpoint not known yet: joins the offer its nonce names. `version`: the
  // frame's as it came (f is in this build's).
  void OnAttach(ucp_ep_h reply_ep, const proto::FrameView& f, uint16_t version);
  // Ends a connection: its endpoint, its routes and (unless it already went) its link.
  void DropConn(ConnId id, bool link_gone = false);
  // Sends a reply frame of this build's version on `ep`, transcoded to `version` first.
  void SendReply(Endpoint* ep, std::string frame, uint16_t version);

  Worker* worker_;
  Callbacks callbacks_;
  std::unique_ptr<RpcListener> listener_;
  uint16_t port_ = 0;
  std::string worker_address_;  // this worker's UCX address, sent in every handshake reply
  const bool shm_enabled_;
  // Offers made by handshakes and not attached yet, by nonce (listener thread and progress
  // thread).
  struct Offer {
    RpcListener::LinkId link = 0;
    bool tcp_only = false;
    std::string peer;
    uint16_t version = proto::kProtocolVersion;  // the connection's, agreed in the handshake
  };
  mutable granary::common::Mutex offers_mu_;
  absl::flat_hash_map<uint64_t, Offer> offers_ ABSL_GUARDED_BY(offers_mu_);
  // Progress-thread state.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // false once destroyed
  ConnId next_id_ = 1;
  struct Conn {
    std::shared_ptr<Endpoint> ep;  // the server's own endpoint to the client's worker
    ucp_ep_h route_key = nullptr;  // the reply-endpoint handle its requests arrive with
    RpcListener::LinkId link = 0;
    // The protocol the connection speaks: an older peer's frames are transcoded to this
    // build's on the way in, and the replies back to the peer's on the way out.
    uint16_t version = proto::kProtocolVersion;
  };
  absl::flat_hash_map<ConnId, Conn> conns_;
  absl::flat_hash_map<RpcListener::LinkId, ConnId> by_link_;
  // Requests are routed by the handle UCX gives as the frame's reply endpoint. That handle is
  // only a key, never sent on: UCX owns it and frees it when it sees the peer fail (UCX 1.13
  // destroys an endpoint it never handed to ucp_ep_create's caller), so replies go out on the
  // server's own endpoint (Conn::ep).
  absl::flat_hash_map<ucp_ep_h, ConnId> by_ep_;
};

}  // namespace granary::transport
