#pragma once

// A TCP port for a test's daemon to listen on, shared by every test helper that picks one.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>

namespace granary::testing {

// Whether port is free on every local address right now (bound and released).
inline bool PortIsFree(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(port);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// A port that is free now, below the kernel's ephemeral range (ip_local_port_range): the kernel
// never hands those to outgoing connections or to a bind to port 0, so the port stays free until
// a test binds it. (A port from bind(0) is an ephemeral one, and the connections a test's own
// daemons opened before it was bound took one of those in CI: a master then failed "in use".)
// Random, so concurrent test processes rarely pick the same one; checked, so a taken one is
// skipped. Falls back to bind(0) where the range leaves no room below it.
inline uint16_t PickFreePort() {
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  int ephemeral_low = 32768;
  {
    std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
    int low = 0;
    if ((f >> low) && low > 0) ephemeral_low = low;
  }
  const int low = 10000, high = ephemeral_low - 1;
  if (high - low >= 1000) {
    std::uniform_int_distribution<int> pick(low, high);
    for (int i = 0; i < 200; ++i) {
      const auto port = static_cast<uint16_t>(pick(rng));
      if (PortIsFree(port)) return port;
    }
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  uint16_t port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace granary::testing
