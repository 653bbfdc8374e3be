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
#include "absl/functional/function_ref.h"
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
  std::string peer;  // host:port, or what the owner named it
  std::atomic<bool> broken{false};
  ucs_status_t error = UCS_OK;
  bool transport_logged = false;
  std::function<void(ucs_status_t)> on_error;  // progress thread; may be empty
};

// Owns a ucp_worker and the thread that drives it. Every UCX call on this worker happens on the
// thread that holds its drive role (drive_mu_): that is its progress thread, except while a
// waiting caller drives it (SpinUntil, on workers created with caller_drive); other threads hand
// it closures with Post(). The progress thread spins briefly when busy and sleeps on the
// worker's event fd when idle, so an idle daemon uses no CPU.
// Lifetime: destroy after everything that Posts to it has stopped; the destructor closes every
// endpoint it still tracks.
class Worker {
 public:
  // caller_drive: let a thread that waits for this worker's result (SpinUntil) run its posted
  // work and progress UCX itself while the progress thread sleeps, so that the request leaves
  // and its reply comes back without a hand-off to and from the progress thread (a client's
  // worker; servers leave it off, so that their handlers stay on their progress thread).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Worker>> Create(
      Context* ctx, std::string name, common::MetricsRegistry* metrics = nullptr,
      bool caller_drive = false);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Runs fn on the progress thread (in order). Thread-safe.
  void Post(std::function<void()> fn);
  // Runs fn on the worker's own thread, never on a driving caller: for work that may block
  // (creating an endpoint to an unreachable host blocks in connect(2) for seconds), which must
  // not hold up a caller that waits with a deadline. In order among these; thread-safe.
  void PostOwn(std::function<void()> fn);
  bool OnOwnThread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // Runs fn on the progress thread (its own thread; see PostOwn) and waits for its result. Not
  // from the progress thread.
  template <typename F>
  auto Run(F&& fn) -> std::invoke_result_t<F> {
    using R = std::invoke_result_t<F>;
    if (OnProgressThread()) return fn();
    std::promise<R> p;
    auto fut = p.get_future();
    PostOwn([&] {
      if constexpr (std::is_void_v<R>) {
        fn();
        p.set_value();
      } else {
        p.set_value(fn());
      }
    });
    return fut.get();
  }
  // Whether this thread holds the drive role now: the progress thread while it runs, or a caller
  // driving in SpinUntil (callbacks run there). UCX calls on this worker need it; "progress
  // thread" in the comments here means whichever thread holds it.
  bool OnProgressThread() const;
  bool caller_drive() const { return caller_drive_; }

  // Polls done() like common::SpinUntil (bounded; true when done() held), for a result this
  // worker delivers. With caller_drive, whenever no other thread holds the drive role (the
  // progress thread sleeps), the caller takes it and runs posted work and ucp_worker_progress
  // itself until done() holds or the worker stays idle, then hands the worker back.
  bool SpinUntil(absl::FunctionRef<bool()> done);

  // Runs now, on this thread, what it posted under a DriveIntent and will not wait for (a
  // message sent without a reply), when no other thread drives the worker; otherwise wakes the
  // progress thread for it. Saves waking the progress thread for one send.
  void SendNow();

  // While one is alive, what this thread Posts to `w` does not wake w's sleeping progress thread:
  // the thread promises to wait for it with w->SpinUntil next, which runs it (or, when it cannot,
  // wakes the progress thread). Saves the progress thread a wake-up per request that the caller
  // sends itself. Nothing on workers without caller_drive.
  class DriveIntent {
   public:
    explicit DriveIntent(Worker* w);
    ~DriveIntent();
    DriveIntent(const DriveIntent&) = delete;
    DriveIntent& operator=(const DriveIntent&) = delete;

   private:
    const Worker* prev_;
  };

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

  // Progress-thread only. Creates an endpoint to a worker address (ucp_worker_query), which
  // lets UCX pick every transport the two sides share. UCX 1.13's shared-memory transports
  // cannot report peer failure, so with peer_failure_handling they are left out; a same-host
  // peer is connected without it (a dead peer then shows as failed transfers, which the
  // master's view of live nodes resolves).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Endpoint>> ConnectWorker(
      const std::string& worker_address, std::string peer, bool peer_failure_handling);
  // This worker's address, for peers to ConnectWorker to.
  [[nodiscard]] absl::StatusOr<std::string> Address();
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
  Worker(Context* ctx, ucp_worker_h w, std::string name, common::MetricsRegistry* metrics,
         bool caller_drive);
  void Loop() ABSL_NO_THREAD_SAFETY_ANALYSIS;  // takes and lends out drive_mu_ as it goes
  // With drive_mu_ held (and released on return): progresses until done() or idle.
  bool Drive(absl::FunctionRef<bool()> done) ABSL_UNLOCK_FUNCTION(drive_mu_);
  // The progress thread takes the drive role back, or lends it out.
  void Take() ABSL_EXCLUSIVE_LOCK_FUNCTION(drive_mu_);
  void Lend() ABSL_UNLOCK_FUNCTION(drive_mu_);
  // Waits until the event fd says there is work (the worker armed), without the drive role.
  void WaitForEvent();
  // Wakes the progress thread when it sleeps with work queued.
  void Kick();
  // Runs what is posted; own: also what PostOwn queued (the worker's own thread only).
  bool RunQueued(bool own);
  void Enqueue(std::function<void()> fn, bool own);
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
  common::MetricsRegistry* metrics_;
  common::MetricCounter* naps_ = nullptr;
  const bool caller_drive_;
  common::MetricCounter* drives_ = nullptr;
  std::atomic<bool> drove_{false};  // a caller drove since the progress thread last looked
  int event_fd_ = -1;               // ucp_worker_get_efd
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // The drive role: whoever holds it may call UCX on worker_ and touch the progress-thread state
  // below (request_handler_, pending_, eps_, closing_).
  granary::common::Mutex drive_mu_;
  granary::common::Mutex mu_;
  struct Queued {
    std::function<void()> fn;
    bool own;  // PostOwn: the worker's own thread runs it, never a driving caller
  };
  std::vector<Queued> queue_ ABSL_GUARDED_BY(mu_);  // in the order posted
  std::atomic<bool> has_queued_{false};
  std::atomic<bool> sleeping_{false};  // the progress thread waits (or is about to) for an event
  RequestHandler request_handler_;
  absl::flat_hash_map<uint64_t, ReplyCallback> pending_;
  // Progress-thread state.
  absl::flat_hash_map<ucp_ep_h, std::shared_ptr<Endpoint>> eps_;
  std::vector<void*> closing_;  // ucp_ep_close_nbx requests still in flight
};

}  // namespace granary::transport
