#include "transport/context.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/log.h"

namespace granary::transport {

absl::Status UcsError(ucs_status_t st, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", ucs_status_string(st));
  switch (st) {
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return absl::ResourceExhaustedError(msg);
    case UCS_ERR_TIMED_OUT:
      return absl::DeadlineExceededError(msg);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return absl::InvalidArgumentError(msg);
    case UCS_ERR_UNSUPPORTED:
      return absl::UnimplementedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

absl::StatusOr<std::unique_ptr<Context>> Context::Create(
    const std::string& name, const std::vector<std::pair<std::string, std::string>>& overrides) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return UcsError(st, "reading UCX configuration");
  // Defaults of ours for transport settings, unless the environment sets them. They go into
  // this context's configuration (UCX applies a transport-level name, given without its
  // transport prefix, to the transports that have it), never into the process environment:
  // setenv would race with getenv in other threads (it crashed a client creating contexts on
  // two threads), and an engine embedding the client keeps its environment as it was.
  //  - CM_REUSEADDR: a restarted daemon must be able to listen on its port again while old
  //    connections sit in TIME_WAIT.
  //  - TX/RX_SEG_SIZE: UCX 1.13 moves tcp traffic (RMA included, emulated with active messages)
  //    in 8 KiB segments, one system call and one epoll round per segment. 1 MiB segments move
  //    a 1 MiB value (and a get's reply) in one message: granary_bench, UCX_TLS=tcp, 1 MiB,
  //    medians of 4 alternating runs: get 2.58 -> 4.09 GB/s, put 2.76 -> 3.99 GB/s against
  //    64 KiB segments (8 KiB segments: about 1 GB/s). Buffers come from UCX's pools and are
  //    touched as used: master and node RSS grew by about 3 MB.
  //  - CONN_NB: UCX 1.13 connects a tcp endpoint with a blocking connect() on the worker's
  //    progress thread. To a peer the network cut off that blocks for seconds (until ARP or the
  //    SYN retries give up): a client's reads, master calls and heartbeats all stalled behind
  //    it, past every timeout (tests/integration/netns_test.cc, a node's link cut mid-read).
  static constexpr struct {
    const char* env;
    const char* name;
    const char* value;
  } kDefaults[] = {{"UCX_TCP_CM_REUSEADDR", "CM_REUSEADDR", "y"},
                   {"UCX_TCP_TX_SEG_SIZE", "TX_SEG_SIZE", "1m"},
                   {"UCX_TCP_RX_SEG_SIZE", "RX_SEG_SIZE", "1m"},
                   {"UCX_TCP_CONN_NB", "CONN_NB", "y"}};
  for (const auto& d : kDefaults) {
    if (std::getenv(d.env) != nullptr) continue;
    st = ucp_config_modify(config, d.name, d.value);
    if (st != UCS_OK) {
      ucp_config_release(config);
      return UcsError(st, absl::StrCat("setting UCX ", d.name, "=", d.value));
    }
  }
  for (const auto& [k, v] : overrides) {
    st = ucp_config_modify(config, k.c_str(), v.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return UcsError(st, absl::StrCat("setting UCX_", k, "=", v));
    }
  }
  ucp_params_t params = {};
  params.field_mask =
      UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  params.name = name.c_str();
  ucp_context_h ctx = nullptr;
  st = ucp_init(&params, config, &ctx);
  ucp_config_release(config);
  if (st != UCS_OK) return UcsError(st, "initializing UCX");
  return std::unique_ptr<Context>(new Context(ctx));
}

Context::~Context() { ucp_cleanup(context_); }

std::vector<std::string> Context::NetResources() const {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (f == nullptr) return {};
  ucp_context_print_info(context_, f);
  std::fclose(f);
  const std::string text(buf, len);
  std::free(buf);
  // "#      resource 2  :  md 1  dev 2  flags -- tcp/lo"
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StrContains(line, " resource ")) continue;
    const size_t dashes = line.rfind("-- ");
    if (dashes == absl::string_view::npos) continue;
    const std::string res(line.substr(dashes + 3));
    if (absl::EndsWith(res, "/memory") || absl::StartsWith(res, "self/")) continue;
    out.push_back(res);
  }
  return out;
}

bool Context::SupportsCudaMemory() const {
  ucp_context_attr_t attr = {};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context_, &attr) != UCS_OK) return false;
  return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

}  // namespace granary::transport
