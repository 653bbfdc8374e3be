#pragma once

#include "absl/strings/string_view.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <ucp/api/ucp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/frame.h"
#include "transport/worker.h"

namespace granary::transport {

// A UCX listener that accepts control connections and dispatches request frames.
// Connection ids are never reused. All callbacks run on the worker's progress thread; Reply and
// Disconnect may be called from any thread. Destroy before the Worker.
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
  static absl::StatusOr<std::unique_ptr<RpcServer>> Create(Worker* worker, uint16_t port,
                                                           Callbacks callbacks);
  ~RpcServer();

  uint16_t port() const { return port_; }
  void Reply(ConnId conn, std::string frame);
  void Disconnect(ConnId conn);
  // The peer's address as the listener saw it ("host:port"); progress-thread only.
  std::string PeerOf(ConnId conn) const;

 private:
  RpcServer(Worker* w, Callbacks cb) : worker_(w), callbacks_(std::move(cb)) {}
  static void OnConnRequest(ucp_conn_request_h req, void* arg);
  void OnFrame(ucp_ep_h reply_ep, absl::string_view frame);
  void DropConn(ConnId id);

  Worker* worker_;
  Callbacks callbacks_;
  ucp_listener_h listener_ = nullptr;
  uint16_t port_ = 0;
  // Progress-thread state.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // false once destroyed
  ConnId next_id_ = 1;
  absl::flat_hash_map<ConnId, std::shared_ptr<Endpoint>> conns_;
  absl::flat_hash_map<ucp_ep_h, ConnId> by_ep_;
};

}  // namespace granary::transport
