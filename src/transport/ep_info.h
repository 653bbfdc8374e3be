#pragma once

#include <ucp/api/ucp.h>

#include <string>

namespace granary::transport {

// The UCX transports an endpoint's lanes use, e.g. rma="posix,cma" am="posix".
struct EndpointTransports {
  std::string rma;
  std::string am;
  // True when bulk data moves over tcp alone.
  bool IsSlowFallback() const { return rma == "tcp"; }
};

// Parses ucp_ep_print_info (UCX 1.13 has no structured query for lanes).
EndpointTransports QueryTransports(ucp_ep_h ep);
// The parser, exposed for tests.
EndpointTransports ParseEpInfo(const std::string& text);

}  // namespace granary::transport
