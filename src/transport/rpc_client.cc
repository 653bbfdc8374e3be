#include "transport/rpc_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <future>

#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "proto/handshake.h"
#include "proto/transcode.h"
#include "transport/ep_info.h"

namespace granary::transport {

namespace {

// The end of the handshake's socket that the client keeps.
struct Dialed {
  int fd = -1;
  proto::HandshakeReply reply;
  std::string local_host;  // the local IP the socket uses
};

// Waits until fd is ready for `events` or the deadline passes.
absl::Status WaitFd(int fd, short events, absl::Time deadline, const std::string& address,
                    const char* what) {
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::UnavailableError(absl::StrCat("no answer from ", address, " while ", what));
    }
    pollfd p = {fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return absl::UnavailableError(absl::StrCat(what, " ", address, ": ", strerror(errno)));
    if (n > 0) return absl::OkStatus();
  }
}

std::string LocalIp(int fd) {
  sockaddr_storage ss = {};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char host[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, host, sizeof(host));
  } else if (ss.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, host, sizeof(host));
  }
  return host;
}

// Connects to a server's RPC port and runs the handshake, all before `deadline`.
absl::Status DialInto(const std::string& address, const proto::HandshakeRequest& req,
                      absl::Time deadline, Dialed* out) {
  GRANARY_ASSIGN_OR_RETURN(common::HostPort hp, common::ParseHostPort(address));
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(hp.host.c_str(), std::to_string(hp.port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", hp.host, "': ", gai_strerror(rc)));
  }
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  out->fd = fd;
  int err = fd < 0 ? errno : 0;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS) {
    err = errno;
  }
  freeaddrinfo(res);
  if (err != 0)
    return absl::UnavailableError(absl::StrCat("connecting to ", address, ": ", strerror(err)));
  GRANARY_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, address, "connecting to"));
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0)
    return absl::UnavailableError(absl::StrCat("connecting to ", address, ": ", strerror(err)));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const std::string hello = proto::EncodeHandshakeRequest(req);
  for (size_t sent = 0; sent < hello.size();) {
    GRANARY_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, address, "sending the handshake to"));
    const ssize_t n = send(fd, hello.data() + sent, hello.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0)
      return absl::UnavailableError(
          absl::StrCat("sending the handshake to ", address, ": ", strerror(errno)));
    sent += static_cast<size_t>(n);
  }
  // The reply: its header, then the body its header announces (bounded by the header check).
  std::string buf;
  size_t want = proto::kHandshakeHeaderSize;
  while (buf.size() < want) {
    GRANARY_RETURN_IF_ERROR(
        WaitFd(fd, POLLIN, deadline, address, "waiting for the handshake reply of"));
    const size_t old = buf.size();
    buf.resize(want);
    const ssize_t n = recv(fd, buf.data() + old, want - old, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      buf.resize(old);
      continue;
    }
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat(address,
                                                 " closed the connection during the handshake",
                                                 n < 0 ? absl::StrCat(": ", strerror(errno)) : ""));
    }
    buf.resize(old + static_cast<size_t>(n));
    if (want == proto::kHandshakeHeaderSize && buf.size() == want) {
      auto h = proto::ParseHandshakeHeader(buf, /*check_version=*/false);
      if (!h.ok()) {
        return absl::UnavailableError(
            absl::StrCat(address, " is not a Granary RPC port: ", h.status().message()));
      }
      want += h->body_len;
    }
  }
  GRANARY_ASSIGN_OR_RETURN(out->reply, proto::DecodeHandshakeReply(buf));
  if (out->reply.code != 0) {
    return absl::Status(static_cast<absl::StatusCode>(out->reply.code),
                        absl::StrCat(address, " refused the connection: ", out->reply.message));
  }
  out->local_host = LocalIp(fd);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RpcClient>> RpcClient::Create(Worker* worker,
                                                             const std::string& address,
                                                             bool try_shm, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  GRANARY_ASSIGN_OR_RETURN(std::string own_address, worker->Address());
  proto::HandshakeRequest hello;
  hello.worker_address = own_address;
  if (!try_shm || !ControlShmEnabled()) hello.flags |= proto::kHandshakeFlagTcpOnly;
  Dialed d;
  absl::Status dialed = DialInto(address, hello, deadline, &d);
  if (dialed.code() == absl::StatusCode::kFailedPrecondition && d.reply.code != 0 &&
      d.reply.version < hello.version && proto::SpeaksVersion(d.reply.version)) {
    // A server older than the version window (strict about versions) refused ours and named
    // its own, which this build speaks too: ask again in that one.
    hello.version = d.reply.version;
    if (d.fd >= 0) close(d.fd);
    d = Dialed{};
    dialed = DialInto(address, hello, deadline, &d);
  }
  if (dialed.ok() && !proto::SpeaksVersion(d.reply.version)) {
    dialed = absl::FailedPreconditionError(absl::StrCat(address, " answered in protocol version ",
                                                        d.reply.version, " (this process speaks ",
                                                        proto::VersionRange(), ")"));
  }
  if (!dialed.ok()) {
    if (d.fd >= 0) close(d.fd);
    return dialed;
  }
  std::unique_ptr<RpcClient> c(new RpcClient(worker, address));
  c->version_ = d.reply.version;
  c->link_fd_ = d.fd;
  c->local_host_ = d.local_host;
  const bool tcp_only = (d.reply.flags & proto::kHandshakeFlagTcpOnly) != 0 ||
                        (hello.flags & proto::kHandshakeFlagTcpOnly) != 0;
  absl::Status st = worker->Run([&]() -> absl::Status {
    GRANARY_ASSIGN_OR_RETURN(c->ep_, worker->ConnectWorker(d.reply.worker_address, address,
                                                           /*peer_failure_handling=*/tcp_only));
    c->ep_->on_error = [raw = c.get(), alive = c->alive_](ucs_status_t us) {
      absl::Status err = absl::UnavailableError(
          absl::StrCat("connection to ", raw->address_, " lost: ", ucs_status_string(us)));
      raw->worker_->Post([raw, err, alive] {
        if (*alive) raw->Broke(err);  // else the client was destroyed meanwhile
      });
    };
    return absl::OkStatus();
  });
  // From here the destructor closes what was made.
  if (st.ok()) {
    c->link_watch_ = std::thread([raw = c.get()] { raw->WatchLink(); });
    const absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(100));
    auto reply = c->CallOn(proto::EncodeFrame(static_cast<uint16_t>(proto::MsgType::kAttach), 0,
                                              proto::AttachRequest{d.reply.nonce, own_address}),
                           left, nullptr);
    st = reply.ok() ? ParseReply<proto::StatusReply>(*reply).status() : reply.status();
  }
  if (!st.ok())
    return absl::Status(st.code(), absl::StrCat("connecting to ", address, ": ", st.message()));
  if (!tcp_only && d.reply.host_id == common::HostId()) {
    const EndpointTransports t = worker->Run([&] { return QueryTransports(c->ep_->ep); });
    c->on_shm_.store(t.am.find("posix") != std::string::npos ||
                     t.am.find("sysv") != std::string::npos);
  }
  return c;
}

RpcClient::~RpcClient() {
  closing_.store(true);
  if (link_fd_ >= 0) shutdown(link_fd_, SHUT_RDWR);  // wakes the watcher
  if (link_watch_.joinable()) link_watch_.join();
  worker_->Run([this] {
    *alive_ = false;
    FailAll(absl::CancelledError("client shut down"));
    on_broken_ = nullptr;
    if (ep_) {
      ep_->on_error = nullptr;
      worker_->Close(ep_);
    }
  });
  if (link_fd_ >= 0) close(link_fd_);
}

void RpcClient::WatchLink() {
  // The server sends nothing after its handshake reply: readable means closed (or a protocol
  // error, which ends the connection the same way).
  pollfd p = {link_fd_, POLLIN | POLLRDHUP, 0};
  while (poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
  if (closing_.load()) return;
  worker_->Post([this, alive = alive_] {
    if (*alive) {
      Broke(absl::UnavailableError(
          absl::StrCat("connection to ", address_, " lost: the server closed it")));
    }
  });
}

void RpcClient::Broke(const absl::Status& st) {
  if (broke_) return;
  broke_ = true;
  FailAll(st);
  if (ep_) {
    ep_->on_error = nullptr;
    worker_->Close(ep_);  // marks it broken: later calls fail at once
  }
  if (link_fd_ >= 0) shutdown(link_fd_, SHUT_RDWR);  // the server hears of it at once
  if (on_broken_) on_broken_(st);
}

std::string RpcClient::LocalHost() { return local_host_; }

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
  if (version_ != proto::kProtocolVersion) {
    // An older server: a request it cannot serve is not sent; the others go in its version.
    absl::Status st = DownTo(&frame);
    if (!st.ok()) {
      worker_->Post([d = std::move(done), st] { d(st); });
      return;
    }
  }
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
    if (!ep_ || ep_->broken.load()) {
      d(absl::UnavailableError(absl::StrCat("connection to ", address_, " is down")));
      return;
    }
    Send(id, std::move(f), std::move(d), via ? std::move(via) : ep_);
  });
}

void RpcClient::Send(uint64_t id, std::string frame, RawDone done, std::shared_ptr<Endpoint> out) {
  in_flight_.insert(id);
  worker_->ExpectReply(
      id, [this, id, d = std::move(done), out](absl::StatusOr<absl::string_view> r) {
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
        if (version_ != proto::kProtocolVersion) {
          // An older server's reply, in this build's version.
          absl::StatusOr<std::string> up = proto::TranscodeFrame(*r, proto::kProtocolVersion);
          if (!up.ok()) {
            d(up.status());
          } else {
            d(absl::string_view(*up));
          }
          return;
        }
        d(*r);
      });
  absl::Status st = worker_->SendFrame(out.get(), std::move(frame), true);
  if (!st.ok()) worker_->FailReply(id, st);
}

absl::Status RpcClient::DownTo(std::string* frame) const {
  uint16_t type = 0;
  if (frame->size() >= proto::kFrameHeaderSize) std::memcpy(&type, frame->data() + 6, 2);
  if (const uint16_t since = proto::MessageSince(type); since > version_) {
    return absl::UnimplementedError(
        absl::StrCat(proto::MsgTypeName(type), " needs protocol ", since, "; ", address_,
                     " speaks ", version_, " (this process speaks ", proto::kProtocolVersion, ")"));
  }
  GRANARY_ASSIGN_OR_RETURN(*frame, proto::TranscodeFrame(*frame, version_));
  return absl::OkStatus();
}

absl::Status RpcClient::CheckEpoch(absl::string_view reply) const {
  const int64_t mine = epoch_.load(std::memory_order_acquire);
  if (mine == 0) return absl::OkStatus();
  const int64_t theirs = proto::FrameEpoch(reply);
  if (theirs == 0) return absl::OkStatus();
  const int64_t highest = highest_epoch_ ? highest_epoch_->load() : 0;
  if (theirs == mine && theirs >= highest) return absl::OkStatus();
  return common::WithReason(
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
