#include "transport/worker.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/spin_wait.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "proto/frame.h"
#include "proto/messages.h"
#include "transport/ep_info.h"

namespace granary::transport {

namespace {
// The worker whose drive role this thread holds (Worker::OnProgressThread).
thread_local const Worker* tls_driving = nullptr;
// The worker this thread will drive for what it posts now (Worker::DriveIntent).
thread_local const Worker* tls_intent = nullptr;

// How a thread with nothing to do waits on its worker (a progress loop between messages, a
// caller that drives its worker for a reply): it polls without pause for at least kPureSpin and
// kSpinsBeforeYield polls, then yields its core between polls kYieldsBeforeSleep times, then
// sleeps. On two cores shared by a client and the master, pure spinning starved the peer that
// had to answer (meta: 300k put / 900k get keys/s), and spinning less made single requests wait
// for a wakeup (4 KiB get: 400k -> 195k keys/s); yielding gave both (meta: ~480k / ~1.1M+, 4
// KiB get ~400k). bench/compare.sh. The pure window is measured in time, not only in polls: a
// poll costs an epoll_wait (~0.5 us) on a worker with tcp endpoints and ~50 ns on one with
// shared-memory endpoints only, and counted in polls alone it shrank tenfold when control
// connections left tcp: every single request's reply then came after a yield (4 KiB get/batch=1
// 104k -> 47k keys/s, put 70k -> 30k).
constexpr int kSpinsBeforeYield = 16;
constexpr int kYieldsBeforeSleep = 48;
constexpr int64_t kPureSpinNs = 10'000;

// The steps of that wait, one per poll that found nothing. Reset after a poll that did work.
class IdleSpin {
 public:
  enum Step { kPoll, kYield, kSleep };
  void Reset() { polls_ = 0; }
  // The next Next() says kSleep.
  void Finish() { polls_ = -1; }
  Step Next() {
    if (polls_ < 0) return kSleep;
    if (polls_++ == 0) {
      since_ns_ = common::MonotonicNs();
      yields_ = 0;
    }
    if (polls_ <= kSpinsBeforeYield || common::MonotonicNs() - since_ns_ < kPureSpinNs)
      return kPoll;
    return ++yields_ <= kYieldsBeforeSleep ? kYield : kSleep;
  }

 private:
  int polls_ = 0;
  int yields_ = 0;
  int64_t since_ns_ = 0;
};
// ucp_worker_arm answering BUSY this many times in a row while progress finds nothing to do
// means UCX keeps a descriptor ready that it never drains (UCX 1.13's tcp transport does so for
// sockets of endpoints a peer closed while they stayed half-open: README "soak"). The thread
// then naps, from kMinNapUs doubling to kMaxNapUs, instead of spinning; work posted to it ends
// a nap at once, and a message that arrives meanwhile waits at most one nap.
constexpr int kBusyArmsBeforeNap = 8;
constexpr int kMinNapUs = 50;
constexpr int kMaxNapUs = 1000;

}  // namespace

bool ControlShmEnabled() {
  const char* v = std::getenv("GRANARY_CONTROL_SHM");
  return v == nullptr || std::string(v) != "0";
}

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(Context* ctx, std::string name,
                                                       common::MetricsRegistry* metrics,
                                                       bool caller_drive) {
  ucp_worker_params_t p = {};
  p.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  p.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h w = nullptr;
  ucs_status_t st = ucp_worker_create(ctx->handle(), &p, &w);
  if (st != UCS_OK) return UcsError(st, "creating a UCX worker");
  std::unique_ptr<Worker> worker(new Worker(ctx, w, std::move(name), metrics, caller_drive));
  st = ucp_worker_get_efd(w, &worker->event_fd_);
  if (st != UCS_OK) return UcsError(st, "getting the UCX worker's event fd");

  ucp_am_handler_param_t hp = {};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kRpcAmId;
  hp.cb = &Worker::OnAm;
  hp.arg = worker.get();
  st = ucp_worker_set_am_recv_handler(w, &hp);
  if (st != UCS_OK) return UcsError(st, "setting the UCX active-message handler");
  worker->thread_ = std::thread([wp = worker.get()] { wp->Loop(); });
  return worker;
}

Worker::Worker(Context* ctx, ucp_worker_h w, std::string name, common::MetricsRegistry* metrics,
               bool caller_drive)
    : ctx_(ctx),
      worker_(w),
      name_(std::move(name)),
      metrics_(metrics),
      caller_drive_(caller_drive) {
  if (metrics_ != nullptr) {
    naps_ = metrics_->Counter(
        "granary_transport_progress_naps_total",
        "Naps of a progress thread whose UCX worker kept reporting events with nothing to "
        "progress (instead of spinning on them)");
    if (caller_drive_) {
      drives_ = metrics_->Counter(
          "granary_transport_caller_drives_total",
          "Waits in which the waiting thread drove its UCX worker itself (sent its request and "
          "progressed the reply) instead of handing both to the progress thread");
    }
  }
}

bool Worker::OnProgressThread() const { return tls_driving == this; }

Worker::DriveIntent::DriveIntent(Worker* w) : prev_(tls_intent) {
  if (w->caller_drive_) tls_intent = w;
}
Worker::DriveIntent::~DriveIntent() { tls_intent = prev_; }

void Worker::Kick() {
  if (has_queued_.load(std::memory_order_seq_cst) && sleeping_.load(std::memory_order_seq_cst)) {
    ucp_worker_signal(worker_);
  }
}

bool Worker::SpinUntil(absl::FunctionRef<bool()> done) {
  if (!caller_drive_ || tls_driving != nullptr) return granary::common::SpinUntil(done);
  bool met = false;
  for (int i = 0; i < common::kSpinPolls && !met; ++i) {
    if (done()) {
      met = true;
    } else if (drive_mu_.TryLock()) {
      met = Drive(done) || granary::common::SpinUntil(done);
      break;
    } else {
      sched_yield();
    }
  }
  // What this thread posted without waking the progress thread (DriveIntent) is the progress
  // thread's from here on, if no drive ran it.
  Kick();
  return met || done();
}

void Worker::SendNow() {
  if (caller_drive_ && tls_driving == nullptr && drive_mu_.TryLock()) {
    tls_driving = this;
    RunQueued(/*own=*/false);
    ucp_worker_progress(worker_);  // most sends complete here; the rest wake the armed worker
    tls_driving = nullptr;
    drive_mu_.Unlock();
  }
  Kick();
}

bool Worker::Drive(absl::FunctionRef<bool()> done) {
  if (drives_ != nullptr) drives_->Inc();
  tls_driving = this;
  bool met = false;
  IdleSpin spin;
  for (;;) {
    if (done()) {
      met = true;
      break;
    }
    bool did = RunQueued(/*own=*/false);
    if (!closing_.empty()) ReapClosing();
    if (ucp_worker_progress(worker_) != 0 || did) {
      spin.Reset();
      continue;
    }
    const IdleSpin::Step step = spin.Next();
    if (step == IdleSpin::kSleep) break;
    if (step == IdleSpin::kYield) sched_yield();
  }
  tls_driving = nullptr;
  drove_.store(true, std::memory_order_relaxed);
  drive_mu_.Unlock();
  // Work posted while this thread drove, by a thread that saw the progress thread asleep and so
  // did not wake it, is the progress thread's now. (Events that arrived meanwhile woke it: it
  // armed the worker before it slept.)
  Kick();
  return met;
}

Worker::~Worker() {
  PostOwn([this] {
    // Force-close every endpoint still open, then let the close requests finish.
    std::vector<std::shared_ptr<Endpoint>> eps;
    for (auto& [h, e] : eps_) eps.push_back(e);
    for (auto& e : eps) Close(e);
    stop_.store(true);
  });
  thread_.join();
  ucp_worker_destroy(worker_);
}

void Worker::Post(std::function<void()> fn) { Enqueue(std::move(fn), /*own=*/false); }

void Worker::PostOwn(std::function<void()> fn) { Enqueue(std::move(fn), /*own=*/true); }

void Worker::Enqueue(std::function<void()> fn, bool own) {
  {
    granary::common::MutexLock lock(&mu_);
    queue_.push_back({std::move(fn), own});
  }
  // Wake the thread only when it sleeps (or is about to): ucp_worker_signal is a write(2) on
  // the worker's eventfd, one per call otherwise. Dekker-style with Loop: Loop publishes
  // sleeping_ before it reads has_queued_, this publishes has_queued_ before it reads
  // sleeping_ (both seq_cst), so at least one of the two sees the other's store. A closure
  // posted by the thread that drives the worker now, or that will drive it (DriveIntent), runs
  // in that drive; one for the worker's own thread always wakes it.
  has_queued_.store(true, std::memory_order_seq_cst);
  if ((own || (tls_driving != this && tls_intent != this)) &&
      sleeping_.load(std::memory_order_seq_cst)) {
    ucp_worker_signal(worker_);
  }
}

void Worker::SetRequestHandler(RequestHandler h) {
  Run([&] { request_handler_ = std::move(h); });
}

uint64_t Worker::NextRequestId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void Worker::ExpectReply(uint64_t request_id, ReplyCallback cb) {
  pending_[request_id] = std::move(cb);
}

bool Worker::FailReply(uint64_t request_id, const absl::Status& st) {
  auto it = pending_.find(request_id);
  if (it == pending_.end()) return false;
  ReplyCallback cb = std::move(it->second);
  pending_.erase(it);
  cb(st);
  return true;
}

bool Worker::RunQueued(bool own) {
  if (!has_queued_.load(std::memory_order_acquire)) return false;
  std::vector<Queued> batch;
  {
    granary::common::MutexLock lock(&mu_);
    batch.swap(queue_);
    if (!own) {
      // A driving caller leaves the own thread's work queued, ahead of anything posted since,
      // in its order (and so runs later work before it: only ordering among the rest holds).
      std::vector<Queued> left;
      for (Queued& q : batch) {
        if (q.own) left.push_back(std::move(q));
      }
      if (!left.empty()) {
        queue_.insert(queue_.begin(), std::make_move_iterator(left.begin()),
                      std::make_move_iterator(left.end()));
      }
    }
    has_queued_.store(!queue_.empty(), std::memory_order_relaxed);
  }
  bool ran = false;
  for (Queued& q : batch) {
    if (q.fn && (own || !q.own)) {
      q.fn();
      ran = true;
    }
  }
  return ran;
}

void Worker::Loop() {
  // Takes the drive role; lends it out (Lend, ..., Take) only where it waits.
  Take();
  IdleSpin spin;
  int busy_arms = 0;  // ucp_worker_arm said BUSY with nothing progressed since
  int nap_us = 0;     // > 0 while napping (kBusyArmsBeforeNap)
  while (!stop_.load(std::memory_order_relaxed)) {
    bool did = RunQueued(/*own=*/true);
    if (!closing_.empty()) ReapClosing();
    if (ucp_worker_progress(worker_) != 0 || did) {
      spin.Reset();
      busy_arms = nap_us = 0;
      continue;
    }
    if (nap_us == 0) {
      const IdleSpin::Step step = spin.Next();
      if (step == IdleSpin::kPoll) continue;
      if (step == IdleSpin::kYield) {
        // Let a thread waiting for this core (often the peer that will answer) run first, and
        // a caller that waits for a reply drive the worker.
        Lend();
        sched_yield();
        Take();
        // A caller drove meanwhile: what it waited for has come, so sleep rather than spin on.
        if (drove_.exchange(false, std::memory_order_relaxed)) spin.Finish();
        continue;
      }
    }
    sleeping_.store(true, std::memory_order_seq_cst);
    ucs_status_t st = ucp_worker_arm(worker_);
    if (st == UCS_ERR_BUSY || has_queued_.load(std::memory_order_seq_cst)) {
      sleeping_.store(false, std::memory_order_relaxed);
      spin.Reset();
      if (st == UCS_ERR_BUSY && ++busy_arms >= kBusyArmsBeforeNap) {
        nap_us = std::min(kMaxNapUs, std::max(kMinNapUs, nap_us * 2));
        Lend();
        Nap(nap_us);
        Take();
      }
      continue;
    }
    busy_arms = nap_us = 0;
    // Armed: the event fd now wakes this thread for anything that arrives. A caller may drive
    // the worker meanwhile (SpinUntil); what it leaves undone, this thread takes when it wakes.
    Lend();
    WaitForEvent();
    Take();
    sleeping_.store(false, std::memory_order_relaxed);
    // Woken by what a caller drove (its reply): look once more, then sleep again.
    if (drove_.exchange(false, std::memory_order_relaxed)) {
      spin.Finish();
    } else {
      spin.Reset();
    }
  }
  // Drain: finish close requests and anything posted during shutdown (bounded, so a wedged
  // peer cannot hang shutdown).
  for (int i = 0; i < 100000 && (!closing_.empty() || i < 100); ++i) {
    RunQueued(/*own=*/true);
    ucp_worker_progress(worker_);
    ReapClosing();
  }
  for (void* req : closing_) ucp_request_free(req);
  closing_.clear();
  Lend();
}

void Worker::Take() {
  drive_mu_.Lock();
  tls_driving = this;
}

void Worker::Lend() {
  tls_driving = nullptr;
  drive_mu_.Unlock();
}

void Worker::WaitForEvent() {
  // ucp_worker_wait without its arm (Loop armed the worker): poll(2) needs no drive role.
  pollfd pfd = {};
  pfd.fd = event_fd_;
  pfd.events = POLLIN;
  while (poll(&pfd, 1, -1) < 0 && errno == EINTR) {
  }
}

void Worker::Nap(int us) {
  if (naps_ != nullptr) naps_->Inc();
  granary::common::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &Worker::HasQueued), absl::Microseconds(us));
}

void Worker::ReapClosing() {
  size_t kept = 0;
  for (void* req : closing_) {
    if (ucp_request_check_status(req) == UCS_INPROGRESS) {
      closing_[kept++] = req;
    } else {
      ucp_request_free(req);
    }
  }
  closing_.resize(kept);
}

ucs_status_t Worker::OnAm(void* arg, const void* header, size_t header_length, void* data,
                          size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Worker*>(arg);
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    // Control frames are always sent eager; a rendezvous one is not ours.
    GRANARY_LOG_WARN << self->name_ << ": dropping a rendezvous active message of " << length
                     << " bytes (control frames are eager)";
    return UCS_OK;
  }
  ucp_ep_h reply_ep =
      (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
  absl::string_view frame(static_cast<const char*>(data), length);
  uint16_t type = 0;
  uint64_t request_id = 0;
  if (length >= proto::kFrameHeaderSize) {
    std::memcpy(&type, frame.data() + 6, 2);
    std::memcpy(&request_id, frame.data() + 12, 8);
  }
  if (type & proto::kReplyBit) {
    auto it = self->pending_.find(request_id);
    if (it == self->pending_.end()) return UCS_OK;  // caller gave up (timeout)
    ReplyCallback cb = std::move(it->second);
    self->pending_.erase(it);
    cb(frame);
    return UCS_OK;
  }
  if (self->request_handler_) self->request_handler_(reply_ep, frame);
  return UCS_OK;
}

void Worker::OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  // The endpoint by its handle, not by a pointer given to UCX: UCX 1.13 may report an error on
  // an endpoint after ucp_ep_close_nbx completed (seen with ThreadSanitizer on a node whose
  // client left), when the Endpoint may be gone. Progress thread (UCX calls this from progress).
  auto* self = static_cast<Worker*>(arg);
  auto it = self->eps_.find(ep);
  if (it == self->eps_.end()) return;  // closed: nobody is waiting on it
  Endpoint* e = it->second.get();
  if (e->broken.exchange(true)) return;
  e->error = status;
  GRANARY_LOG_DEBUG << "endpoint to " << e->peer << " failed: " << ucs_status_string(status);
  if (e->on_error) e->on_error(status);
}

absl::StatusOr<std::shared_ptr<Endpoint>> Worker::Track(ucp_ep_params_t* params, std::string peer,
                                                        bool peer_mode) {
  auto e = std::make_shared<Endpoint>();
  e->peer = std::move(peer);
  params->field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params->err_mode = peer_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params->err_handler.cb = &Worker::OnEpError;
  params->err_handler.arg = this;
  ucs_status_t st = ucp_ep_create(worker_, params, &e->ep);
  if (st != UCS_OK) return UcsError(st, absl::StrCat("connecting to ", e->peer));
  eps_[e->ep] = e;
  return e;
}

absl::StatusOr<std::shared_ptr<Endpoint>> Worker::ConnectWorker(const std::string& worker_address,
                                                                std::string peer,
                                                                bool peer_failure_handling) {
  if (worker_address.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("empty worker address for ", peer));
  }
  ucp_ep_params_t p = {};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  p.address = reinterpret_cast<const ucp_address_t*>(worker_address.data());
  return Track(&p, std::move(peer), peer_failure_handling);
}

absl::StatusOr<std::string> Worker::Address() {
  return Run([this]() -> absl::StatusOr<std::string> {
    ucp_worker_attr_t attr = {};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
    ucs_status_t st = ucp_worker_query(worker_, &attr);
    if (st != UCS_OK) return UcsError(st, "querying the worker address");
    std::string out(reinterpret_cast<const char*>(attr.address), attr.address_length);
    ucp_worker_release_address(worker_, attr.address);
    return out;
  });
}

void Worker::Close(const std::shared_ptr<Endpoint>& e) {
  if (e->ep == nullptr) return;
  eps_.erase(e->ep);
  e->broken.store(true);
  ucp_request_param_t p = {};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t req = ucp_ep_close_nbx(e->ep, &p);
  e->ep = nullptr;
  // Never progress here: Close may run inside a UCX callback. The loop reaps the request.
  if (UCS_PTR_IS_PTR(req)) closing_.push_back(req);
}

namespace {
struct SendCtx {
  std::string frame;
};
void OnSendDone(void* request, ucs_status_t status, void* user_data) {
  delete static_cast<SendCtx*>(user_data);
  ucp_request_free(request);
}
}  // namespace

absl::Status Worker::SendFrame(Endpoint* e, std::string frame, bool request_reply_ep) {
  if (e->ep == nullptr || e->broken.load()) {
    return absl::UnavailableError(absl::StrCat("connection to ", e->peer, " is down"));
  }
  auto* ctx = new SendCtx{std::move(frame)};
  ucp_request_param_t p = {};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.cb.send = &OnSendDone;
  p.user_data = ctx;
  p.flags = UCP_AM_SEND_FLAG_EAGER | (request_reply_ep ? UCP_AM_SEND_FLAG_REPLY : 0);
  ucs_status_ptr_t req =
      ucp_am_send_nbx(e->ep, kRpcAmId, nullptr, 0, ctx->frame.data(), ctx->frame.size(), &p);
  if (req == nullptr) {
    delete ctx;
    return absl::OkStatus();
  }
  if (UCS_PTR_IS_ERR(req)) {
    delete ctx;
    return UcsError(UCS_PTR_STATUS(req), absl::StrCat("sending to ", e->peer));
  }
  return absl::OkStatus();
}

void Worker::NoteTransport(Endpoint* e, bool data_path) {
  if (e->transport_logged || e->ep == nullptr) return;
  e->transport_logged = true;
  EndpointTransports t = QueryTransports(e->ep);
  GRANARY_LOG_INFO << name_ << ": endpoint to " << e->peer << " uses rma=" << t.rma
                   << " am=" << t.am;
  if (data_path && t.IsSlowFallback()) {
    GRANARY_LOG_WARN
        << name_ << ": endpoint to " << e->peer << " moves data over " << t.rma
        << " only (no RDMA or shared memory: the kernel copies every byte on both sides)."
           " Check UCX_TLS and the NICs if this is unexpected.";
  }
  if (metrics_ != nullptr) {
    metrics_
        ->Counter("granary_transport_endpoints_total", "Endpoints connected, by transport",
                  {{"rma", t.rma}, {"am", t.am}})
        ->Inc();
  }
}

}  // namespace granary::transport
