#include "transport/ep_info.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "absl/strings/str_join.h"
#include "common/log.h"

namespace granary::transport {

EndpointTransports ParseEpInfo(const std::string& text) {
  // Lines look like: "#   lane[1]:  3:posix/memory.0 md[2]  -> md[2]/posix/sysdev[255] rma_bw#0"
  std::set<std::string> rma, am;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    size_t lane = line.find("lane[");
    if (lane == std::string::npos) continue;
    size_t colon = line.find(':', lane);
    if (colon == std::string::npos) continue;
    size_t tl_colon = line.find(':', colon + 1);
    size_t slash = line.find('/', colon + 1);
    if (tl_colon == std::string::npos || slash == std::string::npos || slash < tl_colon) continue;
    std::string tl = line.substr(tl_colon + 1, slash - tl_colon - 1);
    if (tl.empty()) continue;
    // After the transport come the lane's roles as whole words: "rma#N", "rma_bw#N", "am",
    // "am_bw#N", "amo#N" (atomics, not active messages), "wireup", "keepalive"...
    std::istringstream roles(line.substr(slash));
    std::string role;
    while (roles >> role) {
      if (role.starts_with("rma#") || role.starts_with("rma_bw#")) rma.insert(tl);
      if (role == "am" || role.starts_with("am_bw#")) am.insert(tl);
    }
  }
  EndpointTransports t;
  t.rma = rma.empty() ? "none" : absl::StrJoin(rma, ",");
  t.am = am.empty() ? "none" : absl::StrJoin(am, ",");
  return t;
}

EndpointTransports QueryTransports(ucp_ep_h ep) {
  char* buf = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&buf, &size);
  if (f == nullptr) return {"unknown", "unknown"};
  ucp_ep_print_info(ep, f);
  fclose(f);
  std::string text(buf, size);
  free(buf);
  GRANARY_LOG_DEBUG << "ucp_ep_print_info:\n" << text;
  return ParseEpInfo(text);
}

}  // namespace granary::transport
