#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "transport/context.h"

namespace granary::transport {

// The active-message id that carries control-plane frames in both directions.
inline constexpr uint16_t kRpcAmId = 17;

// Whether control connections may move onto shared memory (RpcServer, RpcClient):
// GRANARY_CONTROL_SHM=0 in the environment says no.
bool ControlShmEnabled();

class Worker;

// An endpoint to a peer plus its error state. Created and used on its worker's progress thread
// only (shared_ptr so that callbacks can hold it); `broken` may be read from any thread.
struct Endpoint {
  ucp_ep_h ep = nullptr;
  std::string peer;  // host:port or "incoming"
  std::atomic<bool> broken{false};
  ucs_status_t error = UCS_OK;
  bool transport_logged = false;
  std::function<void(ucs_status_t)> on_error;  // progress thread; may be empty
};

// Owns a ucp_worker and the one thread that drives it. Every UCX call on this worker happens on
// that thread: other threads hand it closures with Post(). The thread spins briefly when busy and
// sleeps in ucp_worker_wait when idle, so an idle daemon uses no CPU.
// Lifetime: destroy after everything that Posts to it has stopped; the destructor closes every
// endpoint it still tracks.
class Worker {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Worker>> Create(
      Context* ctx, std::string name, MetricsRegistry* metrics = nullptr);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs fn on the progress thread (in order). Thread-safe.
  void Post(std::function<void()> fn);
  // Runs fn on the progress thread and waits for its result. Not from the progress thread.
  template <typename F>
  auto Run(F&& fn) -> std::invoke_result_t<F> {
    using R = std::invoke_result_t<F>;
    if (OnProgressThread()) return fn();
    std::promise<R> p;
    auto fut = p.get_future();
    Post([&] {
      if constexpr (std::is_void_v<R>) {
        fn();
        p.set_value();
      } else {
        p.set_value(fn());
      }
    });
    return fut.get();
  }
  bool OnProgressThread() const { return std::this_thread::get_id() == thread_.get_id(); }

  // Handler for request frames (type without the reply bit) arriving on kRpcAmId: (reply
  // endpoint or null, frame bytes valid only during the call). Runs on the progress thread.
  using RequestHandler = std::function<void(ucp_ep_h reply_ep, absl::string_view frame)>;
  void SetRequestHandler(RequestHandler h);
  // Progress-thread only. Reply frames are matched to callers by request id, unique in the
  // process (NextRequestId). The callback runs once: with the frame (valid during the call) or
  // with the error passed to FailReply.
  using ReplyCallback = std::function<void(absl::StatusOr<absl::string_view>)>;
  void ExpectReply(uint64_t request_id, ReplyCallback cb);
  bool FailReply(uint64_t request_id, const absl::Status& st);
  static uint64_t NextRequestId();

  // Progress-thread only. Creates an endpoint to host:port (client side of a listener).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Endpoint>> Connect(const std::string& host_port);
  // Progress-thread only. Creates an endpoint to a worker address (ucp_worker_query), which
  // lets UCX pick every transport the two sides share. UCX 1.13's shared-memory transports
  // cannot report peer failure, so with peer_failure_handling they are left out; a same-host
  // peer is connected without it (a dead peer then shows as failed transfers, which the
  // master's view of live nodes resolves).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Endpoint>> ConnectWorker(
      const std::string& worker_address, std::string peer, bool peer_failure_handling);
  // This worker's address, for peers to ConnectWorker to.
  [[nodiscard]] absl::StatusOr<std::string> Address();
  // Progress-thread only. Accepts a connection request from a listener.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Endpoint>> Accept(ucp_conn_request_h req);
  // Progress-thread only. Closes and forgets an endpoint.
  void Close(const std::shared_ptr<Endpoint>& ep);
  // Progress-thread only. Sends one frame; the bytes are owned until sent.
  [[nodiscard]] absl::Status SendFrame(Endpoint* ep, std::string frame, bool request_reply_ep);
  // Logs and counts the transports an endpoint uses, once, after it carried traffic.
  // data_path: warn when bulk data would move over tcp alone.
  void NoteTransport(Endpoint* ep, bool data_path = false);

  ucp_worker_h handle() const { return worker_; }
  Context* context() const { return ctx_; }
  const std::string& name() const { return name_; }

 private:
  Worker(Context* ctx, ucp_worker_h w, std::string name, MetricsRegistry* metrics);
  void Loop();
  bool RunQueued();
  // Sleeps up to `us`, or until work is posted (Loop: UCX busy with nothing to progress).
  void Nap(int us);
  bool HasQueued() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty(); }
  void ReapClosing();
  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param);
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Endpoint>> Track(ucp_ep_params_t* params,
                                                                std::string peer,
                                                                bool peer_mode = true);

  Context* ctx_;
  ucp_worker_h worker_;
  std::string name_;
  MetricsRegistry* metrics_;
  MetricCounter* naps_ = nullptr;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  granary::Mutex mu_;
  std::vector<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> has_queued_{false};
  std::atomic<bool> sleeping_{false};  // the thread is in (or entering) ucp_worker_wait
  RequestHandler request_handler_;
  absl::flat_hash_map<uint64_t, ReplyCallback> pending_;
  // Progress-thread state.
  absl::flat_hash_map<ucp_ep_h, std::shared_ptr<Endpoint>> eps_;
  std::vector<void*> closing_;  // ucp_ep_close_nbx requests still in flight
};

}  // namespace granary::transport
