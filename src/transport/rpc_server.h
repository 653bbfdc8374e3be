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
#include "proto/frame.h"
#include "transport/worker.h"

namespace granary::transport {

// A UCX listener that accepts control connections and dispatches request frames.
// Connection ids are never reused. All callbacks run on the worker's progress thread; Reply and
// Disconnect may be called from any thread. Destroy before the Worker.
//
// Shared memory. UCX 1.13 connects listener endpoints over tcp only, so on one host every
// request would cross the kernel's tcp stack twice. A client on the same host therefore asks
// (kShmOffer, on the tcp endpoint) for this worker's address and a one-time nonce, connects a
// second endpoint to the worker address (UCX picks shared memory there), and sends kShmAttach
// with the nonce on it. From then on the connection's requests and replies use that endpoint.
// The tcp endpoint stays open: it is what reports the peer's failure (UCX's shared-memory
// transports cannot), and its loss drops the whole connection, shared-memory endpoint included.
// GRANARY_CONTROL_SHM=0 in the server's environment refuses offers.
class RpcServer {
 public:
  using ConnId = uint64_t;
  struct Callbacks {
    // A decoded request. Return the reply frame, or nullopt to reply later with Reply().
    std::function<std::optional<std::string>(ConnId, const proto::FrameView&)> on_request;
    // The connection failed or was closed by the peer.
    std::function<void(ConnId)> on_disconnect;
  };
  // port 0 picks a free port; port() tells which.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RpcServer>> Create(Worker* worker,
                                                                         uint16_t port,
                                                                         Callbacks callbacks);
  ~RpcServer();

  uint16_t port() const { return port_; }
  void Reply(ConnId conn, std::string frame);
  void Disconnect(ConnId conn);
  // The peer's address as the listener saw it ("host:port"); progress-thread only.
  std::string PeerOf(ConnId conn) const;

 private:
  RpcServer(Worker* w, Callbacks cb);
  static void OnConnRequest(ucp_conn_request_h req, void* arg);
  void OnFrame(ucp_ep_h reply_ep, absl::string_view frame);
  // kShmOffer and kShmAttach; true when the frame was one of them. `from` is the endpoint the
  // frame came on, null for one not known yet.
  bool OnShmFrame(ucp_ep_h reply_ep, ConnId conn, Endpoint* from, const proto::FrameView& f);
  void DropConn(ConnId id);
  // Drops by_ep_[key] if it still routes conn.
  void EraseRoute(ucp_ep_h key, ConnId conn);
  // The endpoint replies to conn go out on: its shared-memory one once attached.
  Endpoint* ReplyEndpoint(ConnId conn);

  Worker* worker_;
  Callbacks callbacks_;
  ucp_listener_h listener_ = nullptr;
  uint16_t port_ = 0;
  // Progress-thread state.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // false once destroyed
  ConnId next_id_ = 1;
  absl::flat_hash_map<ConnId, std::shared_ptr<Endpoint>> conns_;
  // Every endpoint a connection's requests arrive on, keyed by the handle UCX gives as the
  // frame's reply endpoint: its tcp one and, once attached, the one UCX made for the client's
  // worker-address endpoint. That second handle is only a key, never sent on: UCX owns it and
  // frees it when it sees the peer fail (UCX 1.13 destroys an endpoint it never handed to
  // ucp_ep_create's caller), so replies go out on the server's own endpoint to the client's
  // worker (ShmLink::ep). A request is answered on the endpoint of its route.
  struct Route {
    ConnId conn = 0;
    Endpoint* ep = nullptr;  // owned by conns_ or shm_eps_
  };
  absl::flat_hash_map<ucp_ep_h, Route> by_ep_;
  struct ShmLink {
    std::shared_ptr<Endpoint> ep;  // the server's own, made with ucp_ep_create
    ucp_ep_h route_key = nullptr;  // the reply-endpoint handle its requests arrive with
  };
  absl::flat_hash_map<ConnId, ShmLink> shm_eps_;
  absl::flat_hash_map<uint64_t, ConnId> offers_;  // nonce -> connection, until attached
  const bool shm_enabled_;
};

}  // namespace granary::transport
