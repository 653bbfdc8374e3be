#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "granary/client.h"
#include "tests/integration/etcd/etcd_server.h"
#include "tests/integration/netns.h"

namespace granary::testing {

// A child process started by the tests, with its output in a log file. Killed (SIGKILL) when
// destroyed unless already reaped.
class Process {
 public:
  // argv[0] is a path; env entries are "K=V" added to the current environment.
  static absl::StatusOr<std::unique_ptr<Process>> Start(const std::vector<std::string>& argv,
                                                        const std::vector<std::string>& env,
                                                        const std::string& log_path);
  ~Process();
  pid_t pid() const { return pid_; }
  void Kill(int sig);
  // Waits for exit; returns the exit status (or 128+signal).
  int Wait();
  bool Running();
  // After Kill(SIGSTOP): waits until every thread is stopped (state T in /proc/<pid>/stat);
  // kill() returns before a thread running on another core has stopped. False after timeout.
  bool WaitStopped(double timeout_sec = 5);
  const std::string& log_path() const { return log_path_; }
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string log_path_;
};

// A free TCP port on loopback (bound and released; good enough for tests).
uint16_t FreePort();
// Whether p has exited because a port it was given was taken before it bound it (FreePort's
// port is free when picked, not reserved): the caller starts it again on fresh ports. The RPC
// listener (UCX) logs "Address already in use"; the admin HTTP server "cannot bind an HTTP
// server to HOST:PORT (in use, ...)".
bool ExitedOnABusyPort(Process& p);
// Directory of the built binaries (GRANARY_BIN_DIR, set by ctest).
std::string BinDir();
// HTTP GET on 127.0.0.1 (or host); body or error.
absl::StatusOr<std::string> HttpGet(uint16_t port, const std::string& path);
absl::StatusOr<std::string> HttpGet(const std::string& host, uint16_t port,
                                    const std::string& path);
// The value of an unlabelled (or exactly labelled) Prometheus sample, e.g.
// "granary_master_used_bytes{tier=\"host\"}".
absl::StatusOr<double> ScrapeMetric(uint16_t port, const std::string& sample);
absl::StatusOr<double> ScrapeMetric(const std::string& host, uint16_t port,
                                    const std::string& sample);

// A master and N nodes on loopback, each a real process. Env (UCX_TLS=tcp, say) applies to
// all of them; the caller sets the same in its own environment for in-process clients.
// With Options::netns each runs on a host of its own (tests/integration/netns.h): the master
// at 192.0.2.1, node i at 192.0.2.(10+i), and the calling thread joins client host 0 at
// 192.0.2.100 before Start returns, so the clients it creates are on a host of their own too.
// Such a cluster must be created and destroyed on the same thread (the test body).
class Cluster {
 public:
  struct Options {
    int nodes = 1;
    std::string node_segment_size = "64MB";
    double client_ttl_sec = 2;
    double put_start_timeout_sec = 30;
    uint64_t lease_ttl_ms = 5000;
    std::vector<std::string> env;
    std::vector<std::string> master_flags;
    // Added to every node's command line (after the defaults, so a flag given here wins).
    std::vector<std::string> node_flags;
    // Non-empty: node i keeps its host segment in the file DIR/node<i>.segment
    // (--segment_file; a node restarted in place takes up its file and re-adopts its objects).
    std::string segment_file_dir;
    // Segments each node mounts (2 with a GPU segment beside the host one): Start waits for all.
    int segments_per_node = 1;
    // Separate hosts in network namespaces (root only; NetnsFabric::Supported() says why not).
    bool netns = false;
    // Client hosts made with netns (client0 is the test thread's).
    int netns_clients = 1;
    // With netns: TAP links carried by the test process (NetnsFabric::Create's tap_links), so
    // that SetNetem can add delay and loss where the kernel has no netem.
    bool tap_links = false;
    // HA (loopback only): an etcd of the cluster's own and two masters with --enable_ha (the
    // first elected, the second a standby); nodes and clients find the leader through
    // master_address(), an etcd:// address. RestartMaster then kills the leader and waits for
    // the standby to take over.
    bool ha = false;
    int ha_lease_ttl_sec = 2;
  };
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(const Options& o);
  ~Cluster();

  // host:port of the master, or with Options::ha the etcd:// address nodes and clients follow.
  std::string master_address() const;
  uint16_t master_http_port() const { return http_port_; }
  // The master (with HA: the active one, as of the last start or failover).
  Process* master() { return master_.get(); }
  // With HA: the standby master (null otherwise).
  Process* standby() { return standby_.get(); }
  Process* node(int i) { return nodes_[i].get(); }
  int node_count() const { return static_cast<int>(nodes_.size()); }
  // kill -9 of the master, then a new master on the same ports (no HA: empty metadata). With HA:
  // kill -9 of the leader, a wait until the standby is active (it rebuilds from the nodes'
  // inventories), and the killed one started again on its ports as the new standby.
  absl::Status RestartMaster();
  // With HA: starts the standby again on its ports after it died (a crash).
  absl::Status RestartStandby();
  // Starts one more node (or restarts node i in place when i >= 0).
  absl::Status StartNode(int replace_index = -1);
  // Waits until the master reports this many mounted segments.
  absl::Status WaitForSegments(int count, double timeout_sec = 20);
  absl::StatusOr<double> Metric(const std::string& sample);
  // GET on the master's HTTP port, from inside the master's host with netns (so it works while
  // any other host's link is cut).
  absl::StatusOr<std::string> MasterHttpGet(const std::string& path);
  // The hosts (null without Options::netns).
  NetnsFabric* fabric() { return fabric_.get(); }
  ClientOptions ClientOpts(const std::string& tenant = "default") const;
  absl::StatusOr<std::unique_ptr<Client>> NewClient(const std::string& tenant = "default") const;
  const std::string& dir() const { return dir_; }
  // Dumps every process log to stderr (on test failure).
  void DumpLogs() const;

 private:
  absl::Status StartMaster();
  // Starts a master on these ports into *slot and waits for its /health.
  absl::Status StartMasterOn(uint16_t rpc_port, uint16_t http_port, std::unique_ptr<Process>* slot);
  // The role a master's /role reports on `http_port` ("active", "standby"; "" when it does not
  // answer).
  std::string RoleAt(uint16_t http_port);
  std::vector<std::string> OnHost(const std::string& host, const std::vector<std::string>& argv);
  std::vector<std::string> HostEnv(const std::string& host) const;
  Options options_;
  std::unique_ptr<NetnsFabric> fabric_;
  std::string dir_;
  int master_seq_ = 0;
  uint16_t rpc_port_ = 0, http_port_ = 0;
  std::unique_ptr<Process> master_;
  // HA: the etcd, and the standby with its ports.
  std::unique_ptr<EtcdServer> etcd_;
  std::unique_ptr<Process> standby_;
  uint16_t standby_rpc_port_ = 0, standby_http_port_ = 0;
  std::vector<std::unique_ptr<Process>> nodes_;
  int node_seq_ = 0;
};

// A new directory for segment files (--segment_file) of `bytes` in all: under /dev/shm (tmpfs,
// as in production) when it has that much free, else under /tmp (any file system works; a
// container's /dev/shm is often 64 MB). `prefix` names it. Empty on failure.
std::string SegmentFileDir(const std::string& prefix, uint64_t bytes);

// Deterministic value bytes for (key, version), so any read can be verified.
std::string MakeValue(const std::string& key, uint64_t version, size_t size);

}  // namespace granary::testing
