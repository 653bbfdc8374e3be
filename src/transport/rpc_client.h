#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/messages.h"
#include "transport/worker.h"

namespace granary::transport {

// One control connection to a server, with many requests in flight. Thread-safe. When the
// connection fails every pending call completes with UNAVAILABLE and later calls fail at once;
// the owner makes a new RpcClient to reconnect. Destroy before the Worker.
// Create opens the connection as RpcServer describes: a tcp handshake with the server's
// listener, then an endpoint to the server's worker, on which kAttach is the first frame. The
// handshake's socket stays open as the liveness link; a thread of this client waits on it, and
// its end (the server closed it, or died) fails the connection. UCX picks the endpoint's
// transport: shared memory on one host, unless try_shm is false (a server the caller knows is
// on another host) or GRANARY_CONTROL_SHM=0 is in the environment, which ask for tcp only.
class RpcClient {
 public:
  // Fails with UNAVAILABLE naming the address when nothing answers within `timeout` (connect,
  // handshake and attach together), and with the server's own code when it refuses.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RpcClient>> Create(
      Worker* worker, const std::string& address, bool try_shm = true,
      absl::Duration timeout = absl::Seconds(5));
  ~RpcClient();

  using Done = std::function<void(absl::StatusOr<std::string>)>;
  // Sends a frame (its request id is assigned here) and calls done with the reply frame, on the
  // progress thread.
  void CallAsync(std::string frame, Done done);
  // The same, with the reply frame as UCX delivered it (no copy): `done` runs on the progress
  // thread and the view is valid only while it runs.
  using RawDone = std::function<void(absl::StatusOr<absl::string_view>)>;
  void CallAsyncRaw(std::string frame, RawDone done);
  // Blocking form. DEADLINE_EXCEEDED after timeout.
  [[nodiscard]] absl::StatusOr<std::string> Call(std::string frame, absl::Duration timeout);

  // Encodes req, calls, and decodes the reply as Rep. A reply whose leading status is an
  // error yields that error.
  template <typename Req, typename Rep>
  [[nodiscard]] absl::StatusOr<Rep> Invoke(proto::MsgType type, const Req& req,
                                           absl::Duration timeout) {
    auto frame = Call(proto::EncodeFrame(static_cast<uint16_t>(type), 0, req), timeout);
    if (!frame.ok()) return frame.status();
    return ParseReply<Rep>(*frame);
  }
  template <typename Rep>
  [[nodiscard]] static absl::StatusOr<Rep> ParseReply(absl::string_view data) {
    auto f = proto::DecodeFrame(data);
    if (!f.ok()) return f.status();
    proto::Reader r(f->body);
    proto::WireStatus ws;
    ws.code = r.U8("status.code");
    ws.message = r.Str("status.message", proto::kMaxMessageBytes);
    if (!r.ok()) return r.status();
    if (ws.code != 0) {
      // The reason follows (NOT_LEADER, QUOTA_EXCEEDED...); one this build does not know is
      // left out.
      const uint8_t reason = r.U8("status.reason");
      if (r.ok() && reason <= static_cast<uint8_t>(common::kLastErrorReason)) {
        ws.reason = static_cast<ErrorReason>(reason);
      }
      return ws.ToStatus();
    }
    return proto::DecodeBody<Rep>(f->body);
  }

  // The protocol version the connection speaks (agreed in the handshake): the lower of the
  // server's newest and this build's. Frames go out and come back in this build's version
  // whatever it is: for an older server the client transcodes them (proto::TranscodeFrame), and
  // a request of a message the server's version lacks fails with UNIMPLEMENTED naming both
  // versions, unsent (docs/protocol.md).
  uint16_t peer_version() const { return version_; }
  // The local IP address this connection uses (what the server can reach us at), or "".
  std::string LocalHost();
  bool broken() const { return ep_ == nullptr || ep_->broken.load(); }
  // Whether requests go over shared memory (UCX chose it for the connection's endpoint).
  bool on_shm() const { return on_shm_.load(); }
  const std::string& address() const { return address_; }
  Worker* worker() const { return worker_; }
  // Called once, on the progress thread, when the connection fails.
  void SetOnBroken(std::function<void(absl::Status)> cb);
  // HA fencing (a connection to a master whose hello reply said `epoch`): every request from
  // now on carries `epoch`, and a reply that carries another non-zero epoch, or one below
  // `*highest` (the highest epoch the owner has seen on any connection), is refused with
  // UNAVAILABLE + NOT_LEADER instead of being handed on. Replies with epoch 0 (a standby that
  // never led, refusing) pass. Call once the hello has been accepted, before other calls.
  void SetEpochFence(int64_t epoch, std::shared_ptr<const std::atomic<int64_t>> highest);
  int64_t epoch() const { return epoch_.load(std::memory_order_relaxed); }

 private:
  RpcClient(Worker* w, std::string address) : worker_(w), address_(std::move(address)) {}
  void FailAll(const absl::Status& st);
  // The connection failed (its endpoint or its link): fails every call, once; progress thread.
  void Broke(const absl::Status& st);
  // Waits for the liveness link to end (the link watcher's thread).
  void WatchLink();
  // CallAsync and Call on `via` (null: the connection's endpoint).
  void CallAsyncOn(std::string frame, RawDone done, std::shared_ptr<Endpoint> via);
  [[nodiscard]] absl::StatusOr<std::string> CallOn(std::string frame, absl::Duration timeout,
                                                   std::shared_ptr<Endpoint> via);
  // A request frame of this build's version put in the connection's: UNIMPLEMENTED for a
  // message that version lacks.
  [[nodiscard]] absl::Status DownTo(std::string* frame) const;
  // SetEpochFence's check of one reply frame.
  [[nodiscard]] absl::Status CheckEpoch(absl::string_view reply) const;
  // Sends request `id` on `out` and routes its reply to done; progress-thread only.
  void Send(uint64_t id, std::string frame, RawDone done, std::shared_ptr<Endpoint> out);
  Worker* worker_;
  std::string address_;
  uint16_t version_ = proto::kProtocolVersion;  // set once by Create
  std::shared_ptr<Endpoint> ep_;  // set once by Create: the endpoint to the server's worker
  std::atomic<bool> on_shm_{false};
  int link_fd_ = -1;  // the handshake's socket, open for the connection's life
  std::string local_host_;
  std::thread link_watch_;
  std::atomic<bool> closing_{false};  // the destructor ends the link itself
  std::atomic<int64_t> epoch_{0};     // SetEpochFence; 0: no fence
  std::shared_ptr<const std::atomic<int64_t>> highest_epoch_;  // set before epoch_
  // Progress-thread state.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // false once destroyed
  absl::flat_hash_set<uint64_t> in_flight_;
  std::function<void(absl::Status)> on_broken_;
  bool broke_ = false;
};

}  // namespace granary::transport
