#pragma once

// A raw TCP client for tests that play a hostile HTTP peer (slow, idle, malformed), which a
// real HTTP client library will not do. Header-only; one object per connection, one thread.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "tests/loopback.h"

namespace granary::testing {

// One connection to 127.0.0.1:port, closed when destroyed.
class RawHttp {
 public:
  explicit RawHttp(uint16_t port) {
    fd_ = DialLoopback(port);
    ok_ = fd_ >= 0;
  }
  ~RawHttp() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawHttp(const RawHttp&) = delete;
  RawHttp& operator=(const RawHttp&) = delete;

  bool ok() const { return ok_; }
  int fd() const { return fd_; }
  // All of `bytes`; false once the peer is gone (or a send timeout set on fd() passed).
  bool Send(absl::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // What the server sends until it closes, or what came within `timeout_sec`.
  std::string ReadAll(double timeout_sec = 5) {
    std::string out;
    const auto start = std::chrono::steady_clock::now();
    char buf[65536];
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
           timeout_sec) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // Sends `request` and returns the whole response.
  std::string Exchange(absl::string_view request, double timeout_sec = 5) {
    return Send(request) ? ReadAll(timeout_sec) : std::string();
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// The status code of a raw response ("HTTP/1.1 413 ..."), 0 when there is none.
inline int HttpStatusOf(const std::string& response) {
  int status = 0;
  if (response.size() < 12 || !absl::StartsWith(response, "HTTP/1.1 ")) return 0;
  return absl::SimpleAtoi(response.substr(9, 3), &status) ? status : 0;
}

// The body of a raw response ("" when there is none).
inline std::string HttpBodyOf(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : response.substr(at + 4);
}

}  // namespace granary::testing
