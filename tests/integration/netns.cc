#include "tests/integration/netns.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace granary::testing {
namespace {

constexpr char kPrefix[] = "gnt";
constexpr char kIfName[] = "gn0";

// Runs argv, returning its exit code and combined output.
int Run(const std::vector<std::string>& argv, std::string* out) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0].c_str(), &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    if (out != nullptr) *out = absl::StrCat("spawning ", argv[0], ": ", strerror(rc));
    return -1;
  }
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (out != nullptr) *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// A full path for argv[0] of Process::Start (posix_spawn does not search PATH).
std::string Which(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) dirs = absl::StrSplit(path, ':');
  for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.emplace_back(d);
  for (const auto& d : dirs) {
    std::string p = d + "/" + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return name;
}

// Whether pid is a live process (a zombie is not: a killed run's pid can linger as one).
bool Alive(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

// Namespaces named gnt<pid>-... whose pid is gone: left by a crashed run. Whatever still runs
// in one is killed (it is one of ours), then the namespace is deleted.
void SweepStale() {
  std::string out;
  if (Run({"ip", "netns", "list"}, &out) != 0) return;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::string name(line.substr(0, line.find(' ')));
    if (name.rfind(kPrefix, 0) != 0) continue;
    size_t dash = name.find('-');
    int pid = 0;
    if (dash == std::string::npos ||
        !absl::SimpleAtoi(name.substr(sizeof(kPrefix) - 1, dash - (sizeof(kPrefix) - 1)), &pid) ||
        pid <= 0) {
      continue;
    }
    if (pid == getpid() || Alive(pid)) continue;
    std::string pids;
    Run({"ip", "netns", "pids", name}, &pids);
    for (absl::string_view p : absl::StrSplit(pids, '\n', absl::SkipEmpty())) {
      int victim = 0;
      if (absl::SimpleAtoi(p, &victim) && victim > 1) kill(victim, SIGKILL);
    }
    Run({"ip", "netns", "delete", name}, nullptr);
  }
}

}  // namespace

absl::Status RunCommand(const std::vector<std::string>& argv) {
  std::string out;
  int rc = Run(argv, &out);
  if (rc == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("`", absl::StrJoin(argv, " "), "` exited ", rc, ": ", out));
}

absl::Status NetnsFabric::Supported() {
  static const absl::Status status = [] {
    if (geteuid() != 0) return absl::FailedPreconditionError("network namespaces need root");
    std::string probe = absl::StrCat(kPrefix, getpid(), "-probe");
    absl::Status st = RunCommand({"ip", "netns", "add", probe});
    if (!st.ok())
      return absl::FailedPreconditionError(absl::StrCat("cannot make a netns: ", st.message()));
    st = RunCommand({"ip", "-n", probe, "link", "add", "br0", "type", "bridge"});
    if (st.ok()) {
      st = RunCommand(
          {"ip", "-n", probe, "link", "add", "va", "type", "veth", "peer", "name", "vb"});
    }
    Run({"ip", "netns", "delete", probe}, nullptr);
    if (!st.ok())
      return absl::FailedPreconditionError(absl::StrCat("no bridge/veth: ", st.message()));
    return absl::OkStatus();
  }();
  return status;
}

absl::Status NetnsFabric::NetemSupported() {
  static const absl::Status status = [] {
    absl::Status st = Supported();
    if (!st.ok()) return st;
    std::string probe = absl::StrCat(kPrefix, getpid(), "-netem");
    st = RunCommand({"ip", "netns", "add", probe});
    if (st.ok()) {
      st = RunCommand(
          {"tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"});
    }
    Run({"ip", "netns", "delete", probe}, nullptr);
    if (!st.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "tc netem is not available here (no sch_netem in the kernel?): ", st.message()));
    }
    return absl::OkStatus();
  }();
  return status;
}

namespace {

// A TAP device made in the calling thread's network namespace: its fd (non-blocking), or an
// error naming the device.
absl::StatusOr<int> OpenTap(const std::string& name) {
  int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("open /dev/net/tun: ", strerror(errno)));
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::strncpy(ifr.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("TUNSETIFF ", name, ": ", strerror(err)));
  }
  return fd;
}

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// Carries frames between a host's TAP end and the switch's TAP end, each way after
// half_delay_us and dropping loss_ppm of them: what netem does on a veth pair, in user space.
// One thread; a frame costs a read, a copy into the queue and a write. Owned by the fabric,
// which destroys it (stopping the thread and closing both TAP fds, which removes the devices)
// before it deletes the namespaces.
class NetnsFabric::DelayLink {
 public:
  DelayLink(int host_fd, int switch_fd) : fds_{host_fd, switch_fd} {
    thread_ = std::thread([this] { Run(); });
  }
  ~DelayLink() {
    stop_ = true;
    thread_.join();
    close(fds_[0]);
    close(fds_[1]);
  }
  void Set(int delay_ms, double loss_percent) {
    half_delay_us_ = static_cast<int64_t>(delay_ms) * 500;
    loss_ppm_ = static_cast<uint32_t>(loss_percent * 10'000);
  }

 private:
  struct Frame {
    int64_t due_us;
    std::string bytes;
  };
  void Run() {
    std::deque<Frame> queue[2];  // [0]: host -> switch, [1]: switch -> host
    std::mt19937 rng(12345);
    char buf[65536];
    while (!stop_) {
      const int64_t now = NowUs();
      int timeout_ms = 10;
      for (const auto& q : queue) {
        if (!q.empty()) {
          timeout_ms = std::min<int>(
              timeout_ms, static_cast<int>(std::max<int64_t>(0, q.front().due_us - now) / 1000));
        }
      }
      pollfd p[2] = {{fds_[0], POLLIN, 0}, {fds_[1], POLLIN, 0}};
      poll(p, 2, timeout_ms);
      for (int side = 0; side < 2; ++side) {
        if ((p[side].revents & POLLIN) == 0) continue;
        ssize_t n;
        while ((n = read(fds_[side], buf, sizeof(buf))) > 0) {
          if (loss_ppm_ > 0 && rng() % 1'000'000 < loss_ppm_) continue;
          queue[side].push_back(
              {NowUs() + half_delay_us_, std::string(buf, static_cast<size_t>(n))});
        }
      }
      const int64_t after = NowUs();
      for (int side = 0; side < 2; ++side) {
        while (!queue[side].empty() && queue[side].front().due_us <= after) {
          // A write to a link that is down (SetLink) fails: the frame is lost, as on a wire.
          (void)!write(fds_[1 - side], queue[side].front().bytes.data(),
                       queue[side].front().bytes.size());
          queue[side].pop_front();
        }
      }
    }
  }

  const int fds_[2];
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> half_delay_us_{0};
  std::atomic<uint32_t> loss_ppm_{0};
  std::thread thread_;
};

absl::Status NetnsFabric::TapSupported() {
  static const absl::Status status = [] {
    absl::Status st = Supported();
    if (!st.ok()) return st;
    absl::StatusOr<int> fd = OpenTap(absl::StrCat("gtp", getpid() % 1000000));
    if (!fd.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("TAP devices cannot be made here: ", fd.status().message()));
    }
    close(*fd);
    return absl::OkStatus();
  }();
  return status;
}

absl::StatusOr<std::unique_ptr<NetnsFabric>> NetnsFabric::Create(int nodes, int clients,
                                                                 bool tap_links) {
  absl::Status st = Supported();
  if (!st.ok()) return st;
  static std::once_flag swept;
  std::call_once(swept, SweepStale);
  static int seq = 0;
  if (tap_links) {
    st = TapSupported();
    if (!st.ok()) return st;
  }
  std::unique_ptr<NetnsFabric> f(new NetnsFabric());
  f->tap_links_ = tap_links;
  f->prefix_ = absl::StrCat(kPrefix, getpid(), "-", seq++, "-");
  f->switch_ns_ = f->prefix_ + "switch";
  st = RunCommand({"ip", "netns", "add", f->switch_ns_});
  if (!st.ok()) return st;
  f->made_.push_back(f->switch_ns_);
  for (const auto& cmd : std::vector<std::vector<std::string>>{
           {"ip", "-n", f->switch_ns_, "link", "set", "lo", "up"},
           {"ip", "-n", f->switch_ns_, "link", "add", "br0", "type", "bridge"},
           {"ip", "-n", f->switch_ns_, "link", "set", "br0", "up"}}) {
    st = RunCommand(cmd);
    if (!st.ok()) return st;
  }
  st = f->AddHost("master", "vm", "192.0.2.1");
  for (int i = 0; i < nodes && st.ok(); ++i) {
    st = f->AddHost(NodeHost(i), absl::StrCat("vn", i), absl::StrCat("192.0.2.", 10 + i));
  }
  for (int i = 0; i < clients && st.ok(); ++i) {
    st = f->AddHost(ClientHost(i), absl::StrCat("vc", i), absl::StrCat("192.0.2.", 100 + i));
  }
  if (!st.ok()) return st;
  return f;
}

absl::Status NetnsFabric::AddHost(const std::string& name, const std::string& veth,
                                  const std::string& address) {
  Host h{name, prefix_ + name, veth, address};
  absl::Status st = RunCommand({"ip", "netns", "add", h.ns});
  if (!st.ok()) return st;
  made_.push_back(h.ns);
  if (tap_links_) {
    st = AddTapLink(&h);
  } else {
    st = RunCommand({"ip", "-n", switch_ns_, "link", "add", veth, "type", "veth", "peer", "name",
                     kIfName, "netns", h.ns});
  }
  if (!st.ok()) return st;
  for (const auto& cmd : std::vector<std::vector<std::string>>{
           {"ip", "-n", switch_ns_, "link", "set", veth, "master", "br0"},
           {"ip", "-n", switch_ns_, "link", "set", veth, "up"},
           {"ip", "-n", h.ns, "link", "set", "lo", "up"},
           {"ip", "-n", h.ns, "addr", "add", address + "/24", "dev", kIfName},
           {"ip", "-n", h.ns, "link", "set", kIfName, "up"}}) {
    st = RunCommand(cmd);
    if (!st.ok()) return st;
  }
  hosts_.push_back(h);
  return absl::OkStatus();
}

absl::Status NetnsFabric::AddTapLink(Host* h) {
  // Made in this thread's namespace under names of this process's, then moved and renamed.
  static int seq = 0;
  const std::string base = absl::StrCat("gt", getpid() % 1000000, "-", seq++);
  const std::string host_end = base + "h", switch_end = base + "s";
  absl::StatusOr<int> host_fd = OpenTap(host_end);
  if (!host_fd.ok()) return host_fd.status();
  absl::StatusOr<int> switch_fd = OpenTap(switch_end);
  if (!switch_fd.ok()) {
    close(*host_fd);
    return switch_fd.status();
  }
  links_.push_back(std::make_unique<DelayLink>(*host_fd, *switch_fd));
  h->link = links_.back().get();
  for (const auto& cmd : std::vector<std::vector<std::string>>{
           {"ip", "link", "set", host_end, "netns", h->ns},
           {"ip", "-n", h->ns, "link", "set", host_end, "name", kIfName},
           {"ip", "link", "set", switch_end, "netns", switch_ns_},
           {"ip", "-n", switch_ns_, "link", "set", switch_end, "name", h->veth}}) {
    absl::Status st = RunCommand(cmd);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

NetnsFabric::~NetnsFabric() {
  // The TAP links' threads first (closing their fds removes the devices).
  links_.clear();
  // Back to the mount namespace first (this fails, harmlessly, while a thread started inside
  // still lives: the thread then keeps a /sys of a gone namespace, which no one reads).
  if (saved_mnt_fd_ >= 0) {
    if (setns(saved_mnt_fd_, CLONE_NEWNS) != 0) {
      std::cerr << "netns: could not return to the original mount namespace: " << strerror(errno)
                << "\n";
    }
    close(saved_mnt_fd_);
  }
  if (saved_net_fd_ >= 0) {
    setns(saved_net_fd_, CLONE_NEWNET);
    close(saved_net_fd_);
  }
  if (saved_ipc_fd_ >= 0) {
    setns(saved_ipc_fd_, CLONE_NEWIPC);
    close(saved_ipc_fd_);
  }
  // Anything still running inside is ours: kill it, so that deleting the name frees the
  // namespace (and its links) now rather than when the last process leaves.
  for (const auto& ns : made_) {
    std::string pids;
    Run({"ip", "netns", "pids", ns}, &pids);
    for (absl::string_view p : absl::StrSplit(pids, '\n', absl::SkipEmpty())) {
      int victim = 0;
      if (absl::SimpleAtoi(p, &victim) && victim > 1 && victim != getpid()) kill(victim, SIGKILL);
    }
  }
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
    Run({"ip", "netns", "delete", *it}, nullptr);
  }
}

const NetnsFabric::Host* NetnsFabric::Find(const std::string& host) const {
  for (const auto& h : hosts_) {
    if (h.name == host) return &h;
  }
  return nullptr;
}

std::string NetnsFabric::Address(const std::string& host) const {
  const Host* h = Find(host);
  return h != nullptr ? h->address : "";
}

std::string NetnsFabric::Namespace(const std::string& host) const {
  const Host* h = Find(host);
  return h != nullptr ? h->ns : "";
}

std::vector<std::string> NetnsFabric::Wrap(const std::string& host,
                                           const std::vector<std::string>& argv) {
  std::vector<std::string> out = {Which("ip"),      "netns", "exec", Namespace(host),
                                  Which("unshare"), "--ipc", "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<std::string> NetnsFabric::Env(const std::string& host) const {
  return {"UCX_TLS=tcp", absl::StrCat("UCX_NET_DEVICES=", kIfName),
          "GRANARY_HOST_ID=netns-" + host};
}

absl::Status NetnsFabric::SetLink(const std::string& host, bool up) {
  const Host* h = Find(host);
  if (h == nullptr) return absl::NotFoundError(absl::StrCat("no host ", host));
  return RunCommand({"ip", "-n", switch_ns_, "link", "set", h->veth, up ? "up" : "down"});
}

absl::Status NetnsFabric::SetPartition(const std::string& a, const std::string& b, bool cut) {
  const Host* ha = Find(a);
  const Host* hb = Find(b);
  if (ha == nullptr || hb == nullptr)
    return absl::NotFoundError(absl::StrCat("no host ", a, "/", b));
  for (const auto& [from, to] : {std::pair{ha, hb}, std::pair{hb, ha}}) {
    absl::Status st = RunCommand(
        {"ip", "-n", from->ns, "route", cut ? "add" : "del", "blackhole", to->address + "/32"});
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status NetnsFabric::SetNetem(const std::string& host, int delay_ms, double loss_percent) {
  const Host* h = Find(host);
  if (h == nullptr) return absl::NotFoundError(absl::StrCat("no host ", host));
  if (h->link != nullptr) {
    h->link->Set(delay_ms, loss_percent);
    return absl::OkStatus();
  }
  absl::Status st = NetemSupported();
  if (!st.ok()) return st;
  // Both directions: the host's egress and the switch's egress towards the host.
  for (const auto& [ns, dev] : {std::pair<std::string, std::string>{h->ns, kIfName},
                                std::pair<std::string, std::string>{switch_ns_, h->veth}}) {
    std::vector<std::string> cmd = {"tc",  "-n", ns,     "qdisc", "replace",
                                    "dev", dev,  "root", "netem"};
    cmd.push_back("delay");
    cmd.push_back(absl::StrCat(delay_ms / 2.0, "ms"));
    if (loss_percent > 0) {
      cmd.push_back("loss");
      cmd.push_back(absl::StrCat(loss_percent, "%"));
    }
    st = RunCommand(cmd);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status NetnsFabric::EnterClientHost(int client) {
  const Host* h = Find(ClientHost(client));
  if (h == nullptr) return absl::NotFoundError(absl::StrCat("no client host ", client));
  if (saved_net_fd_ >= 0) return absl::FailedPreconditionError("already entered a client host");
  saved_net_fd_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  saved_ipc_fd_ = open("/proc/thread-self/ns/ipc", O_RDONLY | O_CLOEXEC);
  int fd = open(("/run/netns/" + h->ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (saved_net_fd_ < 0 || saved_ipc_fd_ < 0 || fd < 0) {
    if (fd >= 0) close(fd);
    return absl::InternalError(absl::StrCat("opening namespace files: ", strerror(errno)));
  }
  int rc = setns(fd, CLONE_NEWNET);
  close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("setns(net): ", strerror(errno)));
  if (unshare(CLONE_NEWIPC) != 0) {
    return absl::InternalError(absl::StrCat("unshare(ipc): ", strerror(errno)));
  }
  // UCX finds its tcp devices in /sys/class/net, which shows the namespace of whoever mounted
  // /sys: this thread gets a mount namespace of its own with a /sys of the client namespace, as
  // `ip netns exec` does for the daemons. Nothing propagates back (the copy is a slave).
  saved_mnt_fd_ = open("/proc/thread-self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (saved_mnt_fd_ < 0 || unshare(CLONE_NEWNS) != 0 ||
      mount(nullptr, "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0 ||
      umount2("/sys", MNT_DETACH) != 0 || mount("sysfs", "/sys", "sysfs", 0, nullptr) != 0) {
    return absl::InternalError(absl::StrCat("remounting /sys for the client: ", strerror(errno)));
  }
  for (const auto& e : Env(h->name)) {
    size_t eq = e.find('=');
    setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
  }
  return absl::OkStatus();
}

absl::Status NetnsFabric::RunIn(const std::string& host, const std::function<void()>& fn) const {
  const Host* h = Find(host);
  if (h == nullptr) return absl::NotFoundError(absl::StrCat("no host ", host));
  absl::Status st;
  std::thread t([&] {
    int fd = open(("/run/netns/" + h->ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      st = absl::InternalError(absl::StrCat("entering ", h->ns, ": ", strerror(errno)));
    } else {
      fn();
    }
    if (fd >= 0) close(fd);
  });
  t.join();
  return st;
}

}  // namespace granary::testing
