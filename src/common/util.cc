#include "common/util.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace granary::common {

std::string RandomId() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd());
  return absl::StrFormat("%016x%016x", gen(), gen());
}

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid address '", text, "': ", why, " (expected host:port)"));
  };
  HostPort hp;
  absl::string_view port_text;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("malformed [ipv6]:port");
    }
    hp.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) return bad("missing ':port'");
    hp.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  if (hp.host.empty()) return bad("empty host");
  uint32_t port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port > 65535) return bad("port is not 0..65535");
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

const std::string& HostId() {
  static const std::string id = [] {
    const char* forced = std::getenv("GRANARY_HOST_ID");
    if (forced != nullptr && forced[0] != '\0') return std::string(forced);
    std::string s;
    if (FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r")) {
      char buf[64] = {0};
      if (fgets(buf, sizeof(buf), f) != nullptr) s = buf;
      fclose(f);
    }
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    if (s.empty()) {
      char host[256] = {0};
      gethostname(host, sizeof(host) - 1);
      s = host;
    }
    return s;
  }();
  return id;
}

uint64_t HashBytes(absl::string_view data, uint64_t seed) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

uint64_t WallMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace granary::common
