#pragma once

// A cluster of separate "hosts" on one machine, for the multi-host tests (label netns).
//
// Layout: one network namespace per host (the master, each node, each client) plus one for the
// switch. The switch namespace holds a bridge; every host is joined to it by a veth pair whose
// host end is called gn0 inside the host's namespace and carries 192.0.2.<n>/24 (a documentation
// range). No namespace has a link to the machine's own (initial) namespace, so nothing is routed
// out and nothing outside can reach in.
//
// Daemons are started through `ip netns exec <ns> unshare --ipc --` (both exec, so the pid the
// cluster holds is the daemon's), which also gives each a private IPC namespace. Each host also
// gets its own GRANARY_HOST_ID, so Granary's same-host detection (otherwise the kernel boot id,
// shared by every namespace) says "another host", and UCX_TLS=tcp with UCX_NET_DEVICES=gn0: no
// shared-memory transport, no loopback lane.
//
// The in-process test client: EnterClientHost() moves the calling thread (the test's main
// thread) into the client namespace with setns(CLONE_NEWNET), a fresh IPC namespace
// (unshare(CLONE_NEWIPC)) and a mount namespace whose /sys is the client namespace's (UCX lists
// its tcp devices there), and sets the same UCX and host-id environment in the test process.
// Threads the client starts afterwards inherit the namespace, and sockets are made in the
// namespace of the thread that creates them, so every client connection starts inside. The
// destructor puts the thread back. This was chosen over a child helper process because the
// tests keep using the ordinary Client API and its results directly; the price is that a test
// must create its clients on the thread that entered (the gtest body) and destroy them before
// the fabric goes.
//
// The test harness itself reaches a host with RunIn(host, fn), which runs fn on a short-lived
// thread that has joined that host's namespace (Cluster uses it for the master's HTTP port, so
// a metric can be read even while a client's link is cut).
//
// Delay without netem (this project's kernels have no sch_netem): Create(..., tap_links=true)
// joins each host to the switch by a pair of TAP devices instead of a veth pair, and a thread of
// the test process (a DelayLink) carries the Ethernet frames between the two: a real link with
// real frames and the kernels' real TCP on both ends, whose delay and loss SetNetem sets when
// netem is missing. Such a link is slower than a veth (every frame crosses user space at MTU
// 1500), so only tests that add delay ask for it.
//
// Cleanup: every namespace name starts with "gnt<pid>-" (the test process's pid). The
// destructor deletes all of them (a namespace's links and bridge go with it); Create() first
// sweeps namespaces named after a pid that is no longer alive (a crashed or killed earlier run),
// killing whatever still runs in them.
//
// Thread safety: not thread-safe; one test thread drives it. Needs root (CAP_SYS_ADMIN and
// CAP_NET_ADMIN) and iproute2; Supported() says why not when either is missing.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace granary::testing {

class NetnsFabric {
 public:
  // OK when namespaces, veth and bridge can be made here; else the reason (for GTEST_SKIP).
  static absl::Status Supported();
  // OK when `tc qdisc ... netem` works (checked once per process); else the reason.
  static absl::Status NetemSupported();
  // OK when TAP devices can be made here (/dev/net/tun, for tap_links); else the reason.
  static absl::Status TapSupported();
  // Whether SetNetem can delay links of a fabric made with these tap_links: netem, or TAP links.
  static absl::Status DelaySupported(bool tap_links) {
    return tap_links ? TapSupported() : NetemSupported();
  }

  // The hosts: "master", "node0".. "node<nodes-1>", "client0".. "client<clients-1>".
  // tap_links: every host link is a TAP pair carried by a DelayLink (see above).
  static absl::StatusOr<std::unique_ptr<NetnsFabric>> Create(int nodes, int clients,
                                                             bool tap_links = false);
  ~NetnsFabric();
  NetnsFabric(const NetnsFabric&) = delete;
  NetnsFabric& operator=(const NetnsFabric&) = delete;

  static std::string NodeHost(int i) { return "node" + std::to_string(i); }
  static std::string ClientHost(int i) { return "client" + std::to_string(i); }

  // 192.0.2.x of a host.
  std::string Address(const std::string& host) const;
  // The namespace's name (for `ip netns exec`).
  std::string Namespace(const std::string& host) const;
  // The command prefix that runs argv inside the host (netns + private IPC namespace).
  std::vector<std::string> Wrap(const std::string& host, const std::vector<std::string>& argv);
  // Environment for a process on that host (UCX over gn0 only, its own host id).
  std::vector<std::string> Env(const std::string& host) const;

  // Cuts (up=false) or restores the host's link at the switch: the host keeps its address but
  // reaches nobody and nobody reaches it.
  absl::Status SetLink(const std::string& host, bool up);
  // Cuts (cut=true) or restores the path between two hosts only, both ways, by blackhole routes
  // on each side: packets are dropped silently, as in a partition; other paths stay up.
  absl::Status SetPartition(const std::string& a, const std::string& b, bool cut);
  // netem on both ends of the host's link: half of delay_ms each way (so delay_ms is the round
  // trip it adds between that host and the switch) and loss (percent) each way; needs
  // NetemSupported(). On a TAP link the DelayLink does the same (no netem needed).
  absl::Status SetNetem(const std::string& host, int delay_ms, double loss_percent);

  // Moves the calling thread into the client host (see the header comment); once per fabric.
  absl::Status EnterClientHost(int client = 0);
  // Runs fn on a thread inside the host's network namespace and waits for it.
  absl::Status RunIn(const std::string& host, const std::function<void()>& fn) const;

 private:
  NetnsFabric() = default;
  class DelayLink;
  struct Host {
    std::string name, ns, veth, address;
    DelayLink* link = nullptr;  // a TAP link's carrier (owned by links_), or null for a veth
  };
  const Host* Find(const std::string& host) const;
  absl::Status AddHost(const std::string& name, const std::string& veth,
                       const std::string& address);
  // The TAP pair of a host: the host end (gn0 in its namespace) and the switch end (`veth` on
  // the bridge), carried by a new DelayLink.
  absl::Status AddTapLink(Host* h);

  bool tap_links_ = false;
  std::vector<std::unique_ptr<DelayLink>> links_;

  std::string prefix_;
  std::string switch_ns_;
  std::vector<std::string> made_;  // namespaces to delete
  std::vector<Host> hosts_;
  int saved_net_fd_ = -1, saved_ipc_fd_ = -1, saved_mnt_fd_ = -1;
};

// Runs a command (argv[0] looked up in PATH); OK on exit 0, else its output in the error.
absl::Status RunCommand(const std::vector<std::string>& argv);

}  // namespace granary::testing
