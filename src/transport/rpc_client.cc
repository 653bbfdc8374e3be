#include "transport/rpc_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <future>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/util.h"

namespace granary::transport {

absl::StatusOr<std::unique_ptr<RpcClient>> RpcClient::Create(Worker* worker,
                                                             const std::string& address,
                                                             bool try_shm) {
  std::unique_ptr<RpcClient> c(new RpcClient(worker, address));
  absl::Status st = worker->Run([&]() -> absl::Status {
    GRANARY_ASSIGN_OR_RETURN(c->ep_, worker->Connect(address));
    c->ep_->on_error = [raw = c.get(), alive = c->alive_](ucs_status_t us) {
      absl::Status err = absl::UnavailableError(
          absl::StrCat("connection to ", raw->address_, " lost: ", ucs_status_string(us)));
      raw->worker_->Post([raw, err, alive] {
        if (!*alive) return;  // the client was destroyed meanwhile
        raw->FailAll(err);
        if (raw->shm_ep_) {
          raw->worker_->Close(raw->shm_ep_);
          raw->shm_ep_.reset();
        }
        if (raw->on_broken_) raw->on_broken_(err);
      });
    };
    return absl::OkStatus();
  });
  GRANARY_RETURN_IF_ERROR(st);
  if (try_shm && ControlShmEnabled()) {
    absl::Status attached = c->AttachShm();
    if (!attached.ok())
      LOG_DEBUG << "control connection to " << address << " stays on tcp: " << attached;
  }
  return c;
}

absl::Status RpcClient::AttachShm() {
  constexpr absl::Duration kTimeout = absl::Seconds(5);
  GRANARY_ASSIGN_OR_RETURN(proto::ShmOfferReply offer,
                           (Invoke<proto::ShmOfferRequest, proto::ShmOfferReply>(
                               proto::MsgType::kShmOffer, {}, kTimeout)));
  if (offer.host_id != HostId()) {
    return absl::FailedPreconditionError("the server is on another host");
  }
  GRANARY_ASSIGN_OR_RETURN(std::string own_address, worker_->Address());
  auto ep = worker_->Run([&]() -> absl::StatusOr<std::shared_ptr<Endpoint>> {
    // No peer-failure handling (UCX's shared-memory transports have none): ep_ reports it.
    return worker_->ConnectWorker(offer.worker_address, absl::StrCat(address_, " (shm)"),
                                  /*peer_failure_handling=*/false);
  });
  if (!ep.ok()) return ep.status();
  auto reply = CallOn(proto::EncodeFrame(static_cast<uint16_t>(proto::MsgType::kShmAttach), 0,
                                         proto::ShmAttachRequest{offer.nonce, own_address}),
                      kTimeout, *ep);
  absl::Status st = reply.ok() ? ParseReply<proto::StatusReply>(*reply).status() : reply.status();
  worker_->Run([&] {
    if (st.ok() && !broken()) {
      shm_ep_ = *ep;
      on_shm_.store(true);
    } else {
      worker_->Close(*ep);
    }
  });
  return st;
}

RpcClient::~RpcClient() {
  worker_->Run([this] {
    *alive_ = false;
    FailAll(absl::CancelledError("client shut down"));
    on_broken_ = nullptr;
    if (shm_ep_) worker_->Close(shm_ep_);
    if (ep_) {
      ep_->on_error = nullptr;
      worker_->Close(ep_);
    }
  });
}

std::string RpcClient::LocalHost() {
  return worker_->Run([this]() -> std::string {
    if (!ep_ || ep_->ep == nullptr) return "";
    ucp_ep_attr_t attr = {};
    attr.field_mask = UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR;
    if (ucp_ep_query(ep_->ep, &attr) != UCS_OK) return "";
    char host[INET6_ADDRSTRLEN] = {0};
    const auto* sa = reinterpret_cast<const sockaddr*>(&attr.local_sockaddr);
    if (sa->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, host, sizeof(host));
    } else if (sa->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, host,
                sizeof(host));
    }
    return host;
  });
}

void RpcClient::SetOnBroken(std::function<void(absl::Status)> cb) {
  worker_->Run([&] { on_broken_ = std::move(cb); });
}

void RpcClient::FailAll(const absl::Status& st) {
  auto ids = std::move(in_flight_);
  in_flight_.clear();
  for (uint64_t id : ids) worker_->FailReply(id, st);
}

void RpcClient::SetEpochFence(int64_t epoch, std::shared_ptr<const std::atomic<int64_t>> highest) {
  highest_epoch_ = std::move(highest);
  epoch_.store(epoch, std::memory_order_release);
}

void RpcClient::CallAsync(std::string frame, Done done) {
  CallAsyncOn(
      std::move(frame),
      [d = std::move(done)](absl::StatusOr<absl::string_view> r) {
        if (r.ok()) {
          d(std::string(*r));
        } else {
          d(r.status());
        }
      },
      nullptr);
}

void RpcClient::CallAsyncRaw(std::string frame, RawDone done) {
  CallAsyncOn(std::move(frame), std::move(done), nullptr);
}

void RpcClient::CallAsyncOn(std::string frame, RawDone done, std::shared_ptr<Endpoint> via) {
  uint64_t id = Worker::NextRequestId();
  if (frame.size() >= proto::kFrameHeaderSize) std::memcpy(frame.data() + 12, &id, 8);
  if (const int64_t epoch = epoch_.load(std::memory_order_acquire); epoch != 0) {
    proto::SetFrameEpoch(&frame, epoch);
  }
  worker_->Post([this, id, f = std::move(frame), d = std::move(done), via = std::move(via),
                 alive = alive_]() mutable {
    if (!*alive) {
      d(absl::CancelledError("client shut down"));
      return;
    }
    // The tcp endpoint tells whether the connection is up, whichever endpoint carries the frame.
    if (!ep_ || ep_->broken.load()) {
      d(absl::UnavailableError(absl::StrCat("connection to ", address_, " is down")));
      return;
    }
    Send(id, std::move(f), std::move(d), via ? std::move(via) : shm_ep_ ? shm_ep_ : ep_);
  });
}

void RpcClient::Send(uint64_t id, std::string frame, RawDone done, std::shared_ptr<Endpoint> out) {
  in_flight_.insert(id);
  worker_->ExpectReply(id,
                       [this, id, d = std::move(done), out](absl::StatusOr<absl::string_view> r) {
                         in_flight_.erase(id);
                         if (!r.ok()) {
                           d(r.status());
                           return;
                         }
                         worker_->NoteTransport(out.get());
                         if (absl::Status st = CheckEpoch(*r); !st.ok()) {
                           d(st);
                           return;
                         }
                         d(*r);
                       });
  absl::Status st = worker_->SendFrame(out.get(), std::move(frame), true);
  if (!st.ok()) worker_->FailReply(id, st);
}

absl::Status RpcClient::CheckEpoch(absl::string_view reply) const {
  const int64_t mine = epoch_.load(std::memory_order_acquire);
  if (mine == 0) return absl::OkStatus();
  const int64_t theirs = proto::FrameEpoch(reply);
  if (theirs == 0) return absl::OkStatus();
  const int64_t highest = highest_epoch_ ? highest_epoch_->load() : 0;
  if (theirs == mine && theirs >= highest) return absl::OkStatus();
  return WithReason(
      absl::UnavailableError(absl::StrCat("NOT_LEADER: refused a reply of epoch ", theirs, " from ",
                                          address_, " (the connection was opened at epoch ", mine,
                                          ", the highest epoch seen is ", std::max(highest, mine),
                                          "): a deposed master")),
      ErrorReason::kNotLeader);
}

absl::StatusOr<std::string> RpcClient::Call(std::string frame, absl::Duration timeout) {
  return CallOn(std::move(frame), timeout, nullptr);
}

absl::StatusOr<std::string> RpcClient::CallOn(std::string frame, absl::Duration timeout,
                                              std::shared_ptr<Endpoint> via) {
  struct State {
    std::promise<absl::StatusOr<std::string>> p;
    std::atomic<bool> done{false};
  };
  auto state = std::make_shared<State>();
  auto fut = state->p.get_future();
  Worker::DriveIntent intent(worker_);  // the SpinUntil below sends it
  CallAsyncOn(
      std::move(frame),
      [state](absl::StatusOr<absl::string_view> r) {
        if (state->done.exchange(true)) return;
        if (r.ok()) {
          state->p.set_value(std::string(*r));
        } else {
          state->p.set_value(r.status());
        }
      },
      std::move(via));
  worker_->SpinUntil([&] { return state->done.load(std::memory_order_acquire); });
  if (fut.wait_for(absl::ToChronoNanoseconds(timeout)) != std::future_status::ready) {
    if (!state->done.exchange(true)) {
      return absl::DeadlineExceededError(
          absl::StrCat("no reply from ", address_, " within ", absl::FormatDuration(timeout)));
    }
  }
  return fut.get();
}

}  // namespace granary::transport
