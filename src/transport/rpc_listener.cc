#include "transport/rpc_listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/util.h"

namespace granary::transport {
namespace {

// How long accepting pauses when the process is out of descriptors (EMFILE): the listening
// socket stays readable meanwhile, and polling it again at once would spin.
constexpr absl::Duration kAcceptPause = absl::Milliseconds(100);
// Peers whose drops are remembered for logging once; the set starts afresh beyond this.
constexpr size_t kMaxLoggedPeers = 4096;
// Every result the handshake counter carries.
constexpr const char* kResults[] = {"accepted", "malformed", "version", "timeout",
                                    "overflow", "refused",   "closed"};

std::string PeerName(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {0};
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return common::HostPort{host, port}.ToString();
}

// The host part of "host:port" / "[v6]:port", for logging once per peer.
std::string HostOf(const std::string& peer) {
  auto hp = common::ParseHostPort(peer);
  return hp.ok() ? hp->host : peer;
}

// Writes all of `data` to a non-blocking socket that has room (a fresh socket's send buffer
// holds a handshake reply many times over); false when it could not.
bool WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RpcListener>> RpcListener::Create(Options options,
                                                                 Callbacks callbacks) {
  if (!callbacks.on_handshake || !callbacks.on_closed) {
    return absl::InvalidArgumentError("RpcListener needs on_handshake and on_closed");
  }
  if (options.max_handshakes == 0) {
    return absl::InvalidArgumentError("RpcListener max_handshakes must be at least 1");
  }
  std::unique_ptr<RpcListener> l(new RpcListener(std::move(options), std::move(callbacks)));
  if (absl::Status st = l->Bind(); !st.ok()) return st;
  for (const char* r : kResults) {
    l->counters_[r] =
        l->options_.metrics == nullptr
            ? nullptr
            : l->options_.metrics->Counter(
                  "granary_rpc_handshakes_total",
                  "Connections to the RPC port, by how their handshake ended", {{"result", r}});
  }
  l->thread_ = std::thread([raw = l.get()] { raw->Loop(); });
  return l;
}

absl::Status RpcListener::Bind() {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(options_.port);
  const char* host = options_.host.empty() ? nullptr : options_.host.c_str();
  if (int rc = getaddrinfo(host, port.c_str(), &hints, &res); rc != 0 || res == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot bind the ", options_.name, " port to '",
                                                   options_.host, "': ", gai_strerror(rc)));
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 1024) != 0) err = errno;
  }
  freeaddrinfo(res);
  if (err != 0) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("listening on ", options_.host, ":", options_.port,
                                               " (", options_.name, "): ", strerror(err)));
  }
  listen_fd_ = fd;
  sockaddr_storage ss = {};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return absl::InternalError("epoll or eventfd failed");
  epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  return absl::OkStatus();
}

RpcListener::~RpcListener() {
  stop_.store(true);
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  for (auto& [fd, s] : sockets_) close(fd);
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void RpcListener::CloseLink(LinkId id) {
  {
    granary::common::MutexLock lock(&mu_);
    close_requests_.push_back(id);
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

size_t RpcListener::open_sockets() const { return open_.load(); }

void RpcListener::Count(absl::string_view result) {
  auto it = counters_.find(result);
  if (it != counters_.end() && it->second != nullptr) it->second->Inc();
}

int RpcListener::TimeoutMs() const {
  absl::Time next = absl::InfiniteFuture();
  if (!handshakes_.empty()) next = handshakes_.front().first;
  if (accept_paused_until_ != absl::InfinitePast()) next = std::min(next, accept_paused_until_);
  if (next == absl::InfiniteFuture()) return -1;
  const absl::Duration left = next - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
}

void RpcListener::Loop() {
  epoll_event events[64];
  while (!stop_.load()) {
    const int n = epoll_wait(epoll_fd_, events, 64, TimeoutMs());
    if (n < 0 && errno != EINTR) {
      GRANARY_LOG_ERROR << options_.name << " listener: epoll_wait: " << strerror(errno);
      return;
    }
    for (int i = 0; i < n && !stop_.load(); ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t v = 0;
        (void)!read(wake_fd_, &v, sizeof(v));
        ApplyCloseRequests();
      } else if (fd == listen_fd_) {
        Accept();
      } else if (auto it = sockets_.find(fd); it != sockets_.end()) {
        OnReadable(it->second.get());
      }
    }
    if (accept_paused_until_ != absl::InfinitePast() && absl::Now() >= accept_paused_until_) {
      accept_paused_until_ = absl::InfinitePast();
      epoll_event ev = {};
      ev.events = EPOLLIN;
      ev.data.fd = listen_fd_;
      epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
    }
    ExpireHandshakes();
  }
}

void RpcListener::Accept() {
  for (;;) {
    sockaddr_storage ss = {};
    socklen_t len = sizeof(ss);
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        GRANARY_LOG_WARN << options_.name << " listener: cannot accept (" << strerror(errno)
                         << "); pausing for " << kAcceptPause;
        accept_paused_until_ = absl::Now() + kAcceptPause;
        epoll_event ev = {};
        ev.data.fd = listen_fd_;
        epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
      }
      return;  // EAGAIN: nothing more waiting
    }
    auto s = std::make_unique<Socket>();
    s->fd = fd;
    s->peer = PeerName(ss);
    if (handshaking_ >= options_.max_handshakes) {
      // Too many handshakes at once (a flood): this one goes at once, costing nothing.
      Socket* raw = s.get();
      sockets_[fd] = std::move(s);
      open_.fetch_add(1);
      Drop(raw, "overflow",
           absl::StrCat("more than ", options_.max_handshakes, " handshakes in progress"));
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    s->deadline = absl::Now() + options_.handshake_timeout;
    handshakes_.emplace_back(s->deadline, fd);
    ++handshaking_;
    epoll_event ev = {};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    sockets_[fd] = std::move(s);
    open_.fetch_add(1);
  }
}

void RpcListener::OnReadable(Socket* s) {
  if (!s->linked) {
    ReadHandshake(s);
    return;
  }
  // An accepted link carries nothing after the handshake: data, end of stream or an error all
  // end the connection.
  char byte = 0;
  const ssize_t n = recv(s->fd, &byte, 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  const LinkId id = s->id;
  if (n > 0) {
    GRANARY_LOG_WARN << options_.name << " listener: " << s->peer
                     << " sent data after its handshake; closing the connection";
  }
  Close(s);
  callbacks_.on_closed(id);
}

bool RpcListener::ReadHandshake(Socket* s) {
  // Read what has come, never more than the header, then never more than header + body.
  for (;;) {
    size_t want = proto::kHandshakeHeaderSize;
    if (s->buf.size() >= proto::kHandshakeHeaderSize) {
      auto h = proto::ParseHandshakeHeader(s->buf);
      if (!h.ok()) {
        const bool version = h.status().code() == absl::StatusCode::kFailedPrecondition;
        if (version) {
          proto::HandshakeReply rep;
          rep.code = static_cast<uint16_t>(h.status().code());
          rep.message = std::string(h.status().message());
          WriteAll(s->fd, proto::EncodeHandshakeReply(rep));
        }
        Drop(s, version ? "version" : "malformed", h.status().message());
        return false;
      }
      want += h->body_len;
    }
    if (s->buf.size() == want && want > proto::kHandshakeHeaderSize) break;
    const size_t old = s->buf.size();
    s->buf.resize(want);
    const ssize_t n = recv(s->fd, s->buf.data() + old, want - old, MSG_DONTWAIT);
    if (n <= 0) {
      s->buf.resize(old);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
      Drop(s, "closed",
           absl::StrCat("closed after ", old, " handshake bytes",
                        n < 0 ? absl::StrCat(" (", strerror(errno), ")") : ""));
      return false;
    }
    s->buf.resize(old + static_cast<size_t>(n));
    if (s->buf.size() < want) return true;  // more to come
  }
  auto req = proto::DecodeHandshakeRequest(s->buf);
  if (!req.ok()) {
    proto::HandshakeReply rep;
    rep.code = static_cast<uint16_t>(req.status().code());
    rep.message = std::string(req.status().message());
    WriteAll(s->fd, proto::EncodeHandshakeReply(rep));
    Drop(s, "malformed", req.status().message());
    return false;
  }
  s->id = next_id_++;
  proto::HandshakeReply rep = callbacks_.on_handshake(s->id, *req, s->peer);
  if (!WriteAll(s->fd, proto::EncodeHandshakeReply(rep))) {
    if (rep.code == 0) callbacks_.on_closed(s->id);
    Drop(s, "closed", "the handshake reply could not be sent");
    return false;
  }
  if (rep.code != 0) {
    Drop(s, "refused", rep.message);
    return false;
  }
  Count("accepted");
  s->linked = true;
  s->buf = std::string();
  --handshaking_;
  link_fds_[s->id] = s->fd;
  return true;
}

void RpcListener::Drop(Socket* s, absl::string_view result, absl::string_view why) {
  Count(result);
  const std::string host = HostOf(s->peer);
  if (logged_peers_.size() >= kMaxLoggedPeers) logged_peers_.clear();
  if (logged_peers_.insert(host).second) {
    GRANARY_LOG_WARN << options_.name << " listener: dropped a connection from " << s->peer << " ("
                     << result << "): " << why << " (further drops from " << host
                     << " are counted in granary_rpc_handshakes_total, not logged)";
  } else {
    GRANARY_LOG_DEBUG << options_.name << " listener: dropped " << s->peer << " (" << result
                      << "): " << why;
  }
  Close(s);
}

void RpcListener::Close(Socket* s) {
  const int fd = s->fd;
  if (s->linked) {
    link_fds_.erase(s->id);
  } else if (s->deadline != absl::Time()) {
    --handshaking_;  // its entry in handshakes_ goes when it reaches the front
  }
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  sockets_.erase(fd);  // frees *s
  open_.fetch_sub(1);
}

void RpcListener::ExpireHandshakes() {
  const absl::Time now = absl::Now();
  while (!handshakes_.empty()) {
    auto [deadline, fd] = handshakes_.front();
    auto it = sockets_.find(fd);
    // The entry is stale when its socket is gone, finished its handshake, or the fd was reused
    // by a later socket (whose deadline differs).
    const bool live =
        it != sockets_.end() && !it->second->linked && it->second->deadline == deadline;
    if (live && deadline > now) break;
    handshakes_.pop_front();
    if (live) {
      Drop(it->second.get(), "timeout",
           absl::StrCat("no complete handshake within ",
                        absl::FormatDuration(options_.handshake_timeout), " (",
                        it->second->buf.size(), " bytes came)"));
    }
  }
}

void RpcListener::ApplyCloseRequests() {
  std::vector<LinkId> ids;
  {
    granary::common::MutexLock lock(&mu_);
    ids.swap(close_requests_);
  }
  for (LinkId id : ids) {
    auto it = link_fds_.find(id);
    if (it == link_fds_.end()) continue;
    auto s = sockets_.find(it->second);
    if (s != sockets_.end()) Close(s->second.get());
  }
}

}  // namespace granary::transport
