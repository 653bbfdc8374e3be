#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"

namespace granary::common {

namespace {

constexpr const char* kReasons[] = {"limit",          "deadline",       "slow_reader",
                                    "head_too_large", "body_too_large", "bad_request",
                                    "bad_length",     "no_length"};
// After a refusal the peer may still be sending its body: what arrives is read and dropped for
// up to this long (or this many bytes), so that closing does not reset the connection before
// the peer has read the reply.
constexpr absl::Duration kDrainTime = absl::Seconds(1);
constexpr size_t kDrainBytes = 1 << 20;
// How often the gate looks for connections past their deadline.
constexpr absl::Duration kExpiryScan = absl::Milliseconds(20);
constexpr size_t kMaxLoggedPeers = 4096;

std::string ErrorJson(absl::string_view code, absl::string_view message) {
  const nlohmann::json j = {
      {"success", false},
      {"error", {{"code", std::string(code)}, {"message", std::string(message)}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The error code and reason phrase of each status the gate answers itself.
struct GateStatus {
  int status;
  const char* code;
  const char* phrase;
};
constexpr GateStatus kGateStatuses[] = {
    {400, "INVALID_ARGUMENT", "Bad Request"},
    {408, "REQUEST_TIMEOUT", "Request Timeout"},
    {411, "LENGTH_REQUIRED", "Length Required"},
    {413, "PAYLOAD_TOO_LARGE", "Payload Too Large"},
    {431, "HEADERS_TOO_LARGE", "Request Header Fields Too Large"},
};

const GateStatus& StatusOf(int status) {
  for (const GateStatus& s : kGateStatuses) {
    if (s.status == status) return s;
  }
  return kGateStatuses[0];
}

// A complete response for the gate to send itself (it never reaches httplib).
std::string RawReply(int status, absl::string_view message) {
  const GateStatus& st = StatusOf(status);
  const std::string body = ErrorJson(st.code, message);
  return absl::StrCat("HTTP/1.1 ", st.status, " ", st.phrase,
                      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", body);
}

// Writes all of `data` to the non-blocking socket `fd` by `deadline`. False on error or when
// the peer does not take it in time.
bool WriteAll(int fd, const char* data, size_t size, absl::Time deadline) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(left))));
  }
  return true;
}

void Address(const sockaddr_storage& a, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof(buf));
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof(buf));
    port = ntohs(v6->sin6_port);
  }
  ip = buf;
}

void PeerOf(int fd, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) Address(a, ip, port);
}

void LocalOf(int fd, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) Address(a, ip, port);
}

// Runs each task at once on the thread that enqueues it: httplib's accept thread, whose task
// (process_and_close_socket, overridden below) only hands the socket to the gate.
class InlineTaskQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// A request the gate read whole, served from memory; the response goes to the socket by a
// deadline. One per request, used by one worker.
class BufferedStream : public httplib::Stream {
 public:
  BufferedStream(int fd, std::string bytes, absl::Time deadline)
      : fd_(fd), bytes_(std::move(bytes)), deadline_(deadline) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return !failed_; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, bytes_.size() - pos_);
    std::memcpy(ptr, bytes_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (failed_ || !WriteAll(fd_, ptr, size, deadline_)) {
      failed_ = true;
      return -1;
    }
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { PeerOf(fd_, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { LocalOf(fd_, ip, port); }
  // httplib's one use of socket() is a check against FD_SETSIZE, a select() limit that a
  // buffered request never meets: -1 passes it whatever the descriptor's number.
  socket_t socket() const override { return INVALID_SOCKET; }
  bool failed() const { return failed_; }

 private:
  const int fd_;
  const std::string bytes_;
  const absl::Time deadline_;
  size_t pos_ = 0;
  bool failed_ = false;
};

// `path` as a regex that matches only itself (httplib patterns are regexes).
std::string ExactPattern(absl::string_view path) {
  std::string out;
  for (char c : path) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '/' && c != '_' && c != '-') {
      out += '\\';
    }
    out += c;
  }
  return out;
}

bool IsJsonType(absl::string_view content_type) {
  const absl::string_view type = absl::StripAsciiWhitespace(
      content_type.substr(0, std::min(content_type.find(';'), content_type.size())));
  return absl::EqualsIgnoreCase(type, "application/json");
}

}  // namespace

// httplib's server with its per-connection processing replaced: the accept thread hands each
// socket to the gate (Admit), and a worker later serves the buffered request (Serve).
class HttpServer::Gated : public httplib::Server {
 public:
  explicit Gated(std::function<void(int)> admit) : admit_(std::move(admit)) {
    new_task_queue = [] { return new InlineTaskQueue(); };
  }
  // httplib listens with a backlog of 5: a burst of connections (a flood, or a few scrapers at
  // once) would wait out SYN retries of 1 s and more. Listening again raises it (Linux).
  void RaiseBacklog() { ::listen(svr_sock_, SOMAXCONN); }
  // Processes one whole request and writes its response (Connection: close).
  void Serve(httplib::Stream& stream) {
    bool closed = false;
    process_request(stream, /*close_connection=*/true, closed, nullptr);
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    admit_(sock);
    return true;
  }
  std::function<void(int)> admit_;
};

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)),
      server_(std::make_unique<Gated>([this](int fd) { Admit(fd); })) {
  MetricsRegistry* metrics = options_.metrics;
  if (metrics == nullptr) {
    own_metrics_ = std::make_unique<MetricsRegistry>();
    metrics = own_metrics_.get();
  }
  for (const char* reason : kReasons) {
    refused_[reason] = metrics->Counter(
        "granary_http_connections_refused_total",
        "HTTP connections refused or cut before a handler answered them, by reason",
        {{"reason", reason}});
  }
  server_->set_payload_max_length(options_.max_body_bytes);
  // 405 for a known path asked with another method; 415 for a body that is not JSON. Runs
  // before httplib reads the body (the gate has it in memory already).
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (auto it = routes_.find(req.path); it != routes_.end()) {
      const std::string method = req.method == "HEAD" ? "GET" : req.method;
      if (it->second.count(method) == 0) {
        std::vector<std::string> allowed(it->second.begin(), it->second.end());
        if (it->second.count("GET")) allowed.push_back("HEAD");
        const std::string allow = absl::StrJoin(allowed, ", ");
        res.status = 405;
        res.set_header("Allow", allow);
        res.set_content(ErrorJson("METHOD_NOT_ALLOWED",
                                  absl::StrCat(absl::CHexEscape(req.method), " is not allowed on ",
                                               req.path, " (allowed: ", allow, ")")),
                        "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    const std::string length = req.get_header_value("Content-Length");
    if (!length.empty() && length != "0" && !IsJsonType(req.get_header_value("Content-Type"))) {
      res.status = 415;
      res.set_content(
          ErrorJson("UNSUPPORTED_MEDIA_TYPE",
                    absl::StrCat("a request body must be Content-Type: application/json, got '",
                                 absl::CHexEscape(req.get_header_value("Content-Type")), "'")),
          "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
}

HttpServer::~HttpServer() {
  server_->stop();
  if (accept_thread_.joinable()) accept_thread_.join();
  if (gate_thread_.joinable()) {
    {
      MutexLock lock(&pending_mu_);
      stopping_ = true;
    }
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
    gate_thread_.join();
  }
  for (Lane* lane : {&workers_, &lane_}) {
    {
      MutexLock lock(&lane->mu);
      lane->stop = true;
    }
    for (std::thread& t : lane->threads) t.join();
    MutexLock lock(&lane->mu);
    for (const Job& job : lane->jobs) ::close(job.fd);
  }
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

httplib::Server& HttpServer::server() { return *server_; }

void HttpServer::Route(const std::string& method, const std::string& path, Handler handler) {
  routes_[path].insert(method);
  const std::string pattern = ExactPattern(path);
  if (method == "GET") server_->Get(pattern, std::move(handler));
  if (method == "PUT") server_->Put(pattern, std::move(handler));
  if (method == "DELETE") server_->Delete(pattern, std::move(handler));
  if (method == "POST") server_->Post(pattern, std::move(handler));
}
void HttpServer::Get(const std::string& path, Handler h) { Route("GET", path, std::move(h)); }
void HttpServer::Put(const std::string& path, Handler h) { Route("PUT", path, std::move(h)); }
void HttpServer::Delete(const std::string& path, Handler h) { Route("DELETE", path, std::move(h)); }
void HttpServer::Post(const std::string& path, Handler h) { Route("POST", path, std::move(h)); }

absl::Status HttpServer::Start(const std::string& host, uint16_t port) {
  int bound = port == 0 ? server_->bind_to_any_port(host.c_str())
                        : (server_->bind_to_port(host.c_str(), port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind an HTTP server to ", host, ":", port,
                                               " (in use, or not a local address)"));
  }
  port_ = static_cast<uint16_t>(bound);
  server_->RaiseBacklog();
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("epoll/eventfd: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  gate_thread_ = std::thread([this] { GateLoop(); });
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    workers_.threads.emplace_back([this] { Work(&workers_); });
  }
  lane_.threads.emplace_back([this] { Work(&lane_); });
  accept_thread_ = std::thread([s = server_.get()] { s->listen_after_bind(); });
  // stop() does nothing before the accept loop runs: a server destroyed at once must not hang.
  for (int i = 0; i < 5000 && !server_->is_running(); ++i) absl::SleepFor(absl::Milliseconds(1));
  return absl::OkStatus();
}

void HttpServer::Admit(int fd) {
  {
    MutexLock lock(&pending_mu_);
    if (!stopping_) {
      pending_.push_back(fd);
      fd = -1;
    }
  }
  if (fd >= 0) {
    ::close(fd);
    return;
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void HttpServer::GateLoop() {
  epoll_event events[64];
  while (true) {
    // Idle (nothing held): sleep until a connection comes; else wake for the deadlines.
    const int timeout_ms =
        conns_.empty() ? -1 : static_cast<int>(absl::ToInt64Milliseconds(kExpiryScan));
    const int n = ::epoll_wait(epoll_fd_, events, 64, timeout_ms);
    const absl::Time now = absl::Now();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd != wake_fd_) {
        if (auto it = conns_.find(fd); it != conns_.end()) OnReadable(fd, it->second);
        continue;
      }
      uint64_t count = 0;
      (void)!::read(wake_fd_, &count, sizeof(count));
      std::vector<int> fresh;
      bool stop = false;
      {
        MutexLock lock(&pending_mu_);
        fresh.swap(pending_);
        stop = stopping_;
      }
      if (stop) {
        for (int f : fresh) ::close(f);
        while (!conns_.empty()) CloseConn(conns_.begin()->first);
        return;
      }
      for (int f : fresh) TakeNew(f, now);
    }
    if (now >= next_expiry_scan_) {
      Expire(now);
      next_expiry_scan_ = now + kExpiryScan;
    }
  }
}

void HttpServer::TakeNew(int fd, absl::Time now) {
  std::string peer;
  int peer_port = 0;
  PeerOf(fd, peer, peer_port);
  if (held_.load() >= options_.max_connections) {
    // Make room by closing the connection that has had longest to send its request (one being
    // drained first); when every held connection is with a worker, refuse this one.
    int victim = -1;
    const Conn* oldest = nullptr;
    for (const auto& [f, c] : conns_) {
      if (oldest == nullptr || (c.draining && !oldest->draining) ||
          (c.draining == oldest->draining && c.order < oldest->order)) {
        oldest = &c;
        victim = f;
      }
    }
    if (victim < 0) {
      Count("limit", peer);
      ::close(fd);
      return;
    }
    if (!oldest->draining) Count("limit", oldest->peer);
    CloseConn(victim);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  Conn& c = conns_[fd];
  c.peer = std::move(peer);
  c.deadline = now + options_.request_deadline;
  c.order = next_order_++;
  held_.fetch_add(1);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) CloseConn(fd);
}

void HttpServer::OnReadable(int fd, Conn& c) {
  char buf[64 * 1024];
  if (c.draining) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) c.drained += static_cast<size_t>(n);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || c.drained > kDrainBytes) {
      CloseConn(fd);
    }
    return;
  }
  // Read no further than the request: the head's limit (plus one byte, to see it passed), then
  // the body that Content-Length announced.
  const size_t limit = c.head_end == 0 ? options_.max_head_bytes + 1
                                       : c.head_end + static_cast<size_t>(c.head.body_bytes);
  const ssize_t n =
      ::recv(fd, buf, std::min(sizeof(buf), std::max<size_t>(1, limit - c.bytes.size())), 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {  // the peer left (or failed) before its request was whole
    CloseConn(fd);
    return;
  }
  c.bytes.append(buf, static_cast<size_t>(n));
  if (c.head_end == 0) {
    c.head_end = http::FindHeadEnd(c.bytes, c.scanned);
    c.scanned = c.bytes.size();
    if (c.head_end == 0) {
      if (c.bytes.size() > options_.max_head_bytes) {
        Refuse(fd, c, 431, "head_too_large",
               absl::StrCat("the request line and headers are over ", options_.max_head_bytes,
                            " bytes"));
      }
      return;
    }
    c.head =
        http::CheckHead(absl::string_view(c.bytes).substr(0, c.head_end), options_.max_body_bytes);
    if (c.head.status != 0) {
      Refuse(fd, c, c.head.status, c.head.reason, c.head.message);
      return;
    }
    if (c.head.expect_end > 0) {  // answer "100 Continue" here, and drop the line
      static constexpr absl::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      (void)::send(fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      const size_t len = c.head.expect_end - c.head.expect_begin;
      c.bytes.erase(c.head.expect_begin, len);
      c.head_end -= len;
    }
  }
  if (c.bytes.size() >= c.head_end + c.head.body_bytes) Dispatch(fd, c);
}

void HttpServer::Refuse(int fd, Conn& c, int status, absl::string_view reason,
                        absl::string_view message) {
  Count(reason, c.peer);
  const std::string reply = RawReply(status, message);
  (void)::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd, SHUT_WR);
  c.draining = true;
  c.deadline = absl::Now() + kDrainTime;
  c.bytes.clear();
  c.bytes.shrink_to_fit();
}

void HttpServer::Expire(absl::Time now) {
  std::vector<int> late;
  for (const auto& [fd, c] : conns_) {
    if (now >= c.deadline) late.push_back(fd);
  }
  for (int fd : late) {
    Conn& c = conns_[fd];
    if (!c.draining) {
      Count("deadline", c.peer);
      const std::string reply = RawReply(
          408, absl::StrCat("the request was not complete ",
                            absl::FormatDuration(options_.request_deadline), " after connecting"));
      (void)::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    CloseConn(fd);
  }
}

void HttpServer::Dispatch(int fd, Conn& c) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  c.bytes.resize(c.head_end + c.head.body_bytes);  // anything after the body is not read
  const bool lane = c.head.method == "GET" &&
                    std::find(options_.lane_targets.begin(), options_.lane_targets.end(),
                              c.head.target) != options_.lane_targets.end();
  Job job{fd, std::move(c.bytes)};
  conns_.erase(fd);
  Lane& to = lane ? lane_ : workers_;
  MutexLock lock(&to.mu);
  to.jobs.push_back(std::move(job));
}

void HttpServer::CloseConn(int fd) {
  ::close(fd);  // also leaves the epoll set
  conns_.erase(fd);
  held_.fetch_sub(1);
}

void HttpServer::Count(absl::string_view reason, const std::string& peer) {
  auto it = refused_.find(reason);
  if (it != refused_.end()) it->second->Inc();
  MutexLock lock(&log_mu_);
  if (logged_peers_.size() >= kMaxLoggedPeers || !logged_peers_.insert(peer).second) return;
  GRANARY_LOG_WARN << "HTTP port " << port_ << ": refused a connection from " << peer << " ("
                   << reason
                   << "); further refusals of this peer are only counted "
                      "(granary_http_connections_refused_total)";
}

void HttpServer::Work(Lane* lane) {
  while (true) {
    Job job;
    {
      MutexLock lock(&lane->mu);
      lane->mu.AwaitWithTimeout(absl::Condition(lane, &Lane::Ready), absl::InfiniteDuration());
      if (lane->stop) return;
      job = std::move(lane->jobs.front());
      lane->jobs.pop_front();
    }
    Serve(std::move(job));
  }
}

void HttpServer::Serve(Job job) {
  const int fd = job.fd;
  BufferedStream stream(fd, std::move(job.bytes), absl::Now() + options_.response_deadline);
  server_->Serve(stream);
  if (stream.failed()) {
    std::string peer;
    int port = 0;
    PeerOf(fd, peer, port);
    Count("slow_reader", peer);
  }
  ::close(fd);
  held_.fetch_sub(1);
}

}  // namespace granary::common
