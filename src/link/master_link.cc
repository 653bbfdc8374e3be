#include "link/master_link.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/error_reason.h"
#include "common/status_macros.h"

namespace granary::link {

MasterLink::MasterLink(Options options, transport::Worker* worker, HelloMaker hello,
                       OnHello on_hello)
    : options_(std::move(options)),
      worker_(worker),
      hello_(std::move(hello)),
      on_hello_(std::move(on_hello)),
      backoff_(options_.backoff_initial_ms, options_.backoff_max_ms) {}

absl::StatusOr<std::unique_ptr<MasterLink>> MasterLink::Create(Options options,
                                                               transport::Worker* worker,
                                                               HelloMaker hello, OnHello on_hello) {
  std::unique_ptr<MasterLink> l(
      new MasterLink(std::move(options), worker, std::move(hello), std::move(on_hello)));
  if (std::optional<std::string> endpoints = etcd::EndpointsOfMasterAddress(l->options_.master)) {
    GRANARY_ASSIGN_OR_RETURN(l->etcd_,
                             etcd::EtcdClient::Create(*endpoints, l->options_.etcd_timeout_ms));
  }
  return l;
}

MasterLink::~MasterLink() {
  Shutdown();
  std::shared_ptr<transport::RpcClient> m;
  {
    granary::common::MutexLock lock(&mu_);
    m = std::move(conn_);
  }
}

absl::StatusOr<std::shared_ptr<transport::RpcClient>> MasterLink::Connection() {
  {
    granary::common::MutexLock lock(&mu_);
    if (conn_ && !conn_->broken()) return conn_;
  }
  common::ScopedLogRoute route(options_.log_route);  // connecting may log, on the caller's thread
  // One attempt at a time: a caller that finds one under way waits for its outcome.
  granary::common::MutexLock attempt(&connect_mu_);
  std::shared_ptr<transport::RpcClient> old;  // dropped outside mu_
  {
    granary::common::MutexLock lock(&mu_);
    if (conn_ && !conn_->broken()) return conn_;
    old = std::move(conn_);
    const int64_t now = common::MonotonicUs();
    if (now < next_attempt_us_) {
      // The last attempt's answer (its code and reason), and when the next is due.
      absl::Status st(last_error_.code(),
                      absl::StrCat(last_error_.message(), " (", backoff_.failures(),
                                   " attempt(s) in a row failed; the next in ",
                                   (next_attempt_us_ - now + 999) / 1000, " ms)"));
      last_error_.ForEachPayload(
          [&st](absl::string_view url, const absl::Cord& payload) { st.SetPayload(url, payload); });
      return st;
    }
  }
  old.reset();
  absl::StatusOr<std::shared_ptr<transport::RpcClient>> m = Attempt();
  granary::common::MutexLock lock(&mu_);
  if (m.ok()) {
    backoff_.Reset();
    next_attempt_us_ = 0;
    conn_ = *m;
    return m;
  }
  if (options_.connect_failures != nullptr) options_.connect_failures->Inc();
  last_error_ = m.status();
  next_attempt_us_ = common::MonotonicUs() + backoff_.NextMs() * 1000;
  return m.status();
}

absl::StatusOr<std::string> MasterLink::Resolve() {
  if (etcd_ == nullptr) return options_.master;
  absl::StatusOr<etcd::MasterView> view = etcd::ReadMasterView(etcd_.get(), options_.cluster_id);
  if (!view.ok()) {
    if (!options_.unavailable_errors) return view.status();
    return absl::UnavailableError(absl::StrCat("cannot find the active master through ",
                                               options_.master, ": ", view.status().message()));
  }
  // etcd answers in order, so a view older than one already seen comes only from a lagging
  // endpoint: wait for the current one.
  GRANARY_RETURN_IF_ERROR(
      epochs_.Accept(view->epoch, absl::StrCat("master_view (", view->rpc, ")")));
  highest_epoch_->store(epochs_.highest());
  return view->rpc;
}

absl::StatusOr<proto::HelloReply> MasterLink::Hello(transport::RpcClient* m) {
  absl::StatusOr<proto::HelloReply> rep = m->Invoke<proto::HelloRequest, proto::HelloReply>(
      proto::MsgType::kHello, hello_(), options_.rpc_timeout);
  if (!rep.ok()) {
    // A standby's answer names the active master: pass it on as it is.
    if (!options_.unavailable_errors || ErrorReasonOf(rep.status()) == ErrorReason::kNotLeader) {
      return rep.status();
    }
    if (absl::IsUnavailable(rep.status()) || absl::IsDeadlineExceeded(rep.status())) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach the master at ", m->address(), ": ", rep.status().message()));
    }
    return rep.status();
  }
  GRANARY_RETURN_IF_ERROR(epochs_.Accept(static_cast<int64_t>(rep->epoch),
                                         absl::StrCat("the master at ", m->address())));
  highest_epoch_->store(epochs_.highest());
  return rep;
}

absl::StatusOr<std::shared_ptr<transport::RpcClient>> MasterLink::Attempt() {
  GRANARY_ASSIGN_OR_RETURN(const std::string address, Resolve());
  {
    granary::common::MutexLock lock(&mu_);
    last_address_ = address;
  }
  GRANARY_ASSIGN_OR_RETURN(
      std::shared_ptr<transport::RpcClient> m,
      transport::RpcClient::Create(worker_, address, /*try_shm=*/true, options_.rpc_timeout));
  GRANARY_ASSIGN_OR_RETURN(const proto::HelloReply rep, Hello(m.get()));
  // From now on every request carries the epoch, and every reply must carry it too: a deposed
  // master's are refused.
  if (rep.epoch != 0) m->SetEpochFence(static_cast<int64_t>(rep.epoch), highest_epoch_);
  {
    granary::common::MutexLock lock(&mu_);
    heartbeat_ms_ = std::max<uint32_t>(rep.heartbeat_interval_ms, 50);
  }
  if (on_hello_) GRANARY_RETURN_IF_ERROR(on_hello_(m, rep));
  return m;
}

std::shared_ptr<transport::RpcClient> MasterLink::Current() {
  granary::common::MutexLock lock(&mu_);
  return conn_;
}

void MasterLink::Drop(const std::shared_ptr<transport::RpcClient>& m) {
  std::shared_ptr<transport::RpcClient> old;  // dropped outside mu_
  granary::common::MutexLock lock(&mu_);
  if (conn_ == m) old = std::move(conn_);
}

void MasterLink::Wake(const std::shared_ptr<transport::RpcClient>& m) {
  granary::common::MutexLock lock(&mu_);
  if (conn_ == m) woken_ = true;
}

bool MasterLink::SleepFor(int64_t ms) {
  granary::common::MutexLock lock(&mu_);
  return !mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(ms));
}

bool MasterLink::WaitForHeartbeat() {
  granary::common::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &MasterLink::StoppingOrWoken),
                       absl::Milliseconds(heartbeat_ms_));
  woken_ = false;
  return !stopping_;
}

void MasterLink::WaitToReconnect() {
  // With an etcd:// master a failed connect usually means the leader is gone and another is
  // being elected: the back-off must not keep a node away once the new one is published (seen:
  // a node still in a 3 s wait while the new leader refused every put for want of a mounted
  // segment). So the wait is cut into slices, and ends at once when master_view names another
  // address than the one last tried.
  constexpr int64_t kSliceMs = 100;
  while (true) {
    int64_t left_ms;
    std::string tried;
    {
      granary::common::MutexLock lock(&mu_);
      left_ms = (next_attempt_us_ - common::MonotonicUs() + 999) / 1000;
      tried = last_address_;
    }
    if (left_ms <= 0) return;
    if (!SleepFor(etcd_ == nullptr ? left_ms : std::min(kSliceMs, left_ms))) return;
    if (etcd_ == nullptr) continue;
    absl::StatusOr<etcd::MasterView> view = etcd::ReadMasterView(etcd_.get(), options_.cluster_id);
    if (view.ok() && !tried.empty() && view->rpc != tried) {
      granary::common::MutexLock lock(&mu_);
      next_attempt_us_ = 0;
      return;
    }
  }
}

bool MasterLink::WaitForNextAttempt(int64_t deadline_us) {
  granary::common::MutexLock lock(&mu_);
  const int64_t now = common::MonotonicUs();
  if (now >= deadline_us) return false;
  const int64_t until =
      std::min(deadline_us, std::max(next_attempt_us_, now + options_.backoff_initial_ms * 1000));
  if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Microseconds(until - now))) {
    return false;  // the link is closing
  }
  return common::MonotonicUs() < deadline_us;
}

void MasterLink::Shutdown() {
  granary::common::MutexLock lock(&mu_);
  stopping_ = true;
}

bool MasterLink::stopping() {
  granary::common::MutexLock lock(&mu_);
  return stopping_;
}

bool MasterLink::FailedOver(const absl::Status& st, const transport::RpcClient& m) {
  if (ErrorReasonOf(st) == ErrorReason::kNotLeader) return true;
  return absl::IsUnavailable(st) && m.broken();
}

int MasterLink::failures() {
  granary::common::MutexLock lock(&mu_);
  return backoff_.failures();
}

uint32_t MasterLink::heartbeat_ms() {
  granary::common::MutexLock lock(&mu_);
  return heartbeat_ms_;
}

}  // namespace granary::link
