#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "proto/handshake.h"

namespace granary::transport {

// Granary's own RPC port: a plain TCP listener that speaks only the handshake of
// proto/handshake.h, so that no stranger's byte reaches UCX (UCX 1.13's sockaddr listener
// aborts the process on a malformed connection-manager message). What it accepts:
//   - a 12-byte header with the magic, this protocol version and a body length of at most
//     kMaxHandshakeBody, then that body, all within `handshake_timeout` of the accept (one
//     deadline for the whole handshake, not per read);
//   - nothing after the handshake: a byte sent on an accepted link ends it.
// Anything else is dropped: the socket is closed at once (a bad version or a bad body gets a
// reply naming the problem first), counted in granary_rpc_handshakes_total{result=...} and
// logged once per peer address. At most `max_handshakes` sockets may be in their handshake at
// once; the ones beyond are closed at accept. A closed socket costs no descriptor.
// An accepted socket stays open as the connection's liveness link: its peer closing it (or
// dying: the kernel closes it) is reported through on_closed.
// Thread safety: one thread of its own runs accept, the handshakes and the links, and every
// callback; CloseLink, PeerOf and links() may be called from any thread. The destructor stops
// the thread (no callback runs after it returns) and closes every socket.
class RpcListener {
 public:
  using LinkId = uint64_t;
  struct Options {
    std::string host = "0.0.0.0";  // bind address ("::" for IPv6, "127.0.0.1" loopback only)
    uint16_t port = 0;             // 0 picks a free port
    absl::Duration handshake_timeout = absl::Seconds(5);
    size_t max_handshakes = 256;
    common::MetricsRegistry* metrics = nullptr;  // may be null
    std::string name = "rpc";                    // for logs
  };
  struct Callbacks {
    // A well-formed request on link `id` from `peer` ("host:port"): the reply to send. A reply
    // with code 0 keeps the link open (and watched) until CloseLink or the peer ends it; any
    // other code closes it after the reply.
    std::function<proto::HandshakeReply(LinkId id, const proto::HandshakeRequest& req,
                                        const std::string& peer)>
        on_handshake;
    // An accepted link ended by its peer (closed, died, or sent a byte). Not called for links
    // closed with CloseLink.
    std::function<void(LinkId id)> on_closed;
  };

  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RpcListener>> Create(Options options,
                                                                           Callbacks callbacks);
  ~RpcListener();
  RpcListener(const RpcListener&) = delete;
  RpcListener& operator=(const RpcListener&) = delete;

  uint16_t port() const { return port_; }
  // Closes an accepted link (the server dropped the connection); no on_closed follows.
  void CloseLink(LinkId id);
  // Sockets open now: accepted links plus handshakes in progress (tests, metrics).
  size_t open_sockets() const;

 private:
  struct Socket {
    int fd = -1;
    LinkId id = 0;
    std::string peer;
    bool linked = false;  // the handshake was accepted
    absl::Time deadline;  // of the handshake
    std::string buf;      // handshake bytes read so far
  };
  RpcListener(Options o, Callbacks cb) : options_(std::move(o)), callbacks_(std::move(cb)) {}
  [[nodiscard]] absl::Status Bind();
  void Loop();
  void Accept();
  void OnReadable(Socket* s);
  // Reads the handshake as far as it has come; false when the socket was dropped.
  bool ReadHandshake(Socket* s);
  void Drop(Socket* s, absl::string_view result, absl::string_view why);
  void Close(Socket* s);
  void ExpireHandshakes();
  void ApplyCloseRequests();
  void Count(absl::string_view result);
  int TimeoutMs() const;

  const Options options_;
  const Callbacks callbacks_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop, or close requests queued
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // Listener-thread state.
  LinkId next_id_ = 1;
  absl::flat_hash_map<int, std::unique_ptr<Socket>> sockets_;  // by fd
  absl::flat_hash_map<LinkId, int> link_fds_;                  // accepted links
  std::deque<std::pair<absl::Time, int>> handshakes_;          // (deadline, fd), in accept order
  size_t handshaking_ = 0;
  absl::flat_hash_set<std::string> logged_peers_;          // hosts whose drop was logged
  absl::Time accept_paused_until_ = absl::InfinitePast();  // out of descriptors
  absl::flat_hash_map<std::string, common::MetricCounter*> counters_;
  mutable granary::common::Mutex mu_;
  std::vector<LinkId> close_requests_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> open_{0};
};

}  // namespace granary::transport
