#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

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
// A server on the same host is asked, at Create, to move the connection onto shared memory
// (see RpcServer); if it refuses or cannot, the connection stays on tcp. GRANARY_CONTROL_SHM=0
// in the environment skips the attempt, and so does try_shm false (a server the caller knows
// is on another host: the question costs a round trip, up to 5 s to a host cut off).
class RpcClient {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RpcClient>> Create(Worker* worker,
                                                                         const std::string& address,
                                                                         bool try_shm = true);
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
      if (r.ok() && reason <= static_cast<uint8_t>(kLastErrorReason)) {
        ws.reason = static_cast<ErrorReason>(reason);
      }
      return ws.ToStatus();
    }
    return proto::DecodeBody<Rep>(f->body);
  }

  // The local IP address this connection uses (what the server can reach us at), or "".
  std::string LocalHost();
  bool broken() const { return ep_ == nullptr || ep_->broken.load(); }
  // Whether requests go over shared memory (Create attached the connection there).
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
  // CallAsync and Call on `via` (null: the connection's endpoint, shared memory once attached).
  void CallAsyncOn(std::string frame, RawDone done, std::shared_ptr<Endpoint> via);
  [[nodiscard]] absl::StatusOr<std::string> CallOn(std::string frame, absl::Duration timeout,
                                                   std::shared_ptr<Endpoint> via);
  // SetEpochFence's check of one reply frame.
  [[nodiscard]] absl::Status CheckEpoch(absl::string_view reply) const;
  // Sends request `id` on `out` and routes its reply to done; progress-thread only.
  void Send(uint64_t id, std::string frame, RawDone done, std::shared_ptr<Endpoint> out);
  // The kShmOffer / kShmAttach handshake; on success requests use shm_ep_ from then on.
  [[nodiscard]] absl::Status AttachShm();

  Worker* worker_;
  std::string address_;
  std::shared_ptr<Endpoint> ep_;      // tcp: the connection, and what reports its loss
  std::shared_ptr<Endpoint> shm_ep_;  // progress-thread state; requests go here when set
  std::atomic<bool> on_shm_{false};
  std::atomic<int64_t> epoch_{0};                              // SetEpochFence; 0: no fence
  std::shared_ptr<const std::atomic<int64_t>> highest_epoch_;  // set before epoch_
  // Progress-thread state.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // false once destroyed
  absl::flat_hash_set<uint64_t> in_flight_;
  std::function<void(absl::Status)> on_broken_;
};

}  // namespace granary::transport
