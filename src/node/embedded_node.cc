#include "granary/embedded_node.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/etcd/master_view.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "common/util.h"
#include "node/node_server.h"

namespace granary {

namespace {

constexpr uint16_t kPortMin = 12300;  // Mooncake's MC_STORE_CLIENT_MIN/MAX_PORT defaults
constexpr uint16_t kPortMax = 14300;
constexpr int kPortDraws = 20;

absl::Status Validate(const EmbeddedNodeOptions& o) {
  if (etcd::EndpointsOfMasterAddress(o.master).has_value()) {
    GRANARY_RETURN_IF_ERROR(etcd::ValidateMasterAddress("master", o.master, o.cluster_id));
  } else {
    GRANARY_RETURN_IF_ERROR(common::ParseHostPort(o.master).status());
  }
  if (o.segment_size < (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment_size ", o.segment_size, " is below the 1 MiB minimum"));
  }
  if (o.hostname.empty()) return absl::InvalidArgumentError("hostname is empty");
  if (o.mount_timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mount_timeout_ms ", o.mount_timeout_ms, " is not positive"));
  }
  return absl::OkStatus();
}

// Whether a TCP socket can bind `port` on every address now (the UCX listener binds the same).
// A hint only: the port can be taken between this and the listener, which Start then retries.
bool PortLooksFree(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(port);
  bool ok = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

node::NodeOptions ToNodeOptions(const EmbeddedNodeOptions& o, uint16_t port) {
  node::NodeOptions n;
  n.master = o.master;
  n.cluster_id = o.cluster_id;
  n.host_segment_size = o.segment_size;
  n.rpc_port = port;
  n.local_hostname = o.hostname;
  n.host_segment_name = common::HostPort{o.hostname, port}.ToString();
  n.serve_http = false;
  n.log_level = o.log_level.has_value() ? static_cast<int>(*o.log_level) : -1;
  return n;
}

// Creates the node on `options.port`, or on a drawn free port when it is 0.
absl::StatusOr<std::unique_ptr<node::NodeServer>> CreateOnAPort(const EmbeddedNodeOptions& o) {
  if (o.port != 0) return node::NodeServer::Create(ToNodeOptions(o, o.port));
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> draw(kPortMin, kPortMax);
  absl::Status last = absl::UnavailableError("no port drawn");
  for (int i = 0; i < kPortDraws; ++i) {
    const auto port = static_cast<uint16_t>(draw(rng));
    if (!PortLooksFree(port)) continue;
    auto n = node::NodeServer::Create(ToNodeOptions(o, port));
    if (n.ok() || !absl::StrContains(n.status().message(), "listening on port")) return n;
    last = n.status();  // taken meanwhile: draw again
  }
  return absl::UnavailableError(absl::StrCat("no free port in ", kPortMin, "-", kPortMax, " after ",
                                             kPortDraws, " draws (last: ", last.message(), ")"));
}

}  // namespace

struct EmbeddedNode::Impl {
  std::string address;
  granary::common::Mutex mu;
  std::unique_ptr<node::NodeServer> server ABSL_GUARDED_BY(mu);
  std::thread thread ABSL_GUARDED_BY(mu);  // runs server->Run()
};

EmbeddedNode::EmbeddedNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

EmbeddedNode::~EmbeddedNode() { Stop(); }

absl::StatusOr<std::unique_ptr<EmbeddedNode>> EmbeddedNode::Start(
    const EmbeddedNodeOptions& options) {
  GRANARY_RETURN_IF_ERROR(Validate(options));
  GRANARY_ASSIGN_OR_RETURN(std::unique_ptr<node::NodeServer> server, CreateOnAPort(options));
  auto impl = std::make_unique<Impl>();
  impl->address = common::HostPort{options.hostname, server->listen_port()}.ToString();
  node::NodeServer* raw = server.get();
  {
    granary::common::MutexLock lock(&impl->mu);
    impl->server = std::move(server);
    impl->thread = std::thread([raw] { raw->Run(); });
  }
  std::unique_ptr<EmbeddedNode> node(new EmbeddedNode(std::move(impl)));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.mount_timeout_ms);
  while (!raw->connected()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      node->Stop();
      return absl::UnavailableError(absl::StrCat(
          "the embedded node at ", node->address(), " could not mount its segment at master ",
          options.master, " within ", options.mount_timeout_ms, " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return node;
}

const std::string& EmbeddedNode::address() const { return impl_->address; }

const std::string& EmbeddedNode::segment_name() const { return impl_->address; }

void EmbeddedNode::Stop() {
  granary::common::MutexLock lock(&impl_->mu);  // a second caller waits until the first is done
  if (!impl_->server) return;
  impl_->server->Shutdown();  // Run() unmounts and returns
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->server.reset();
}

}  // namespace granary
