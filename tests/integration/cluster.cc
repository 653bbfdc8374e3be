#include "tests/integration/cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/mutex.h"
#include "tests/free_port.h"

extern char** environ;

namespace granary::testing {

absl::StatusOr<std::unique_ptr<Process>> Process::Start(const std::vector<std::string>& argv,
                                                        const std::vector<std::string>& env,
                                                        const std::string& log_path) {
  // An entry of env replaces the inherited one of the same name (getenv finds the first).
  auto name = [](const std::string& e) { return e.substr(0, e.find('=')); };
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string inherited(*e);
    bool replaced = false;
    for (const auto& x : env) replaced = replaced || name(x) == name(inherited);
    if (!replaced) envs.push_back(std::move(inherited));
  }
  for (const auto& e : env) envs.push_back(e);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  auto p = std::make_unique<Process>();
  p->log_path_ = log_path;
  int rc = posix_spawn(&p->pid_, argv[0].c_str(), &fa, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("spawning ", argv[0], ": ", strerror(rc)));
  }
  return p;
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    Wait();
  }
}

void Process::Kill(int sig) {
  if (!reaped_ && pid_ > 0) kill(pid_, sig);
}

int Process::Wait() {
  if (!reaped_) {
    int st = 0;
    waitpid(pid_, &st, 0);
    reaped_ = true;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  return status_;
}

bool Process::Running() {
  if (reaped_) return false;
  int st = 0;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return false;
  }
  return true;
}

bool Process::WaitStopped(double timeout_sec) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_sec * 1000));
  const std::string dir = absl::StrCat("/proc/", pid_, "/task");
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator(dir, ec)) {
      std::ifstream in(task.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(in)), {});
      // The state follows the command name's closing parenthesis: "pid (comm) S ...".
      const size_t at = stat.rfind(')');
      if (at == std::string::npos || at + 2 >= stat.size() || stat[at + 2] != 'T') all = false;
    }
    if (all && !ec) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

std::string Process::Log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint16_t FreePort() { return PickFreePort(); }

bool ExitedOnABusyPort(Process& p) {
  if (p.Running()) return false;
  const std::string log = p.Log();
  return log.find("Address already in use") != std::string::npos ||
         log.find("address already in use") != std::string::npos ||
         log.find("cannot bind an HTTP server") != std::string::npos;
}

std::string BinDir() {
  const char* d = std::getenv("GRANARY_BIN_DIR");
  return d != nullptr ? d : "build/bin";
}

absl::StatusOr<std::string> HttpGet(uint16_t port, const std::string& path) {
  return HttpGet("127.0.0.1", port, path);
}

absl::StatusOr<std::string> HttpGet(const std::string& host, uint16_t port,
                                    const std::string& path) {
  httplib::Client c(host, port);
  c.set_connection_timeout(2);
  c.set_read_timeout(5);
  auto res = c.Get(path.c_str());
  if (!res) return absl::UnavailableError(absl::StrCat("GET ", path, " on port ", port, " failed"));
  if (res->status != 200) {
    return absl::UnavailableError(
        absl::StrCat("GET ", path, ": HTTP ", res->status, " ", res->body));
  }
  return res->body;
}

absl::StatusOr<double> ScrapeMetric(uint16_t port, const std::string& sample) {
  return ScrapeMetric("127.0.0.1", port, sample);
}

absl::StatusOr<double> ScrapeMetric(const std::string& host, uint16_t port,
                                    const std::string& sample) {
  auto body = HttpGet(host, port, "/metrics");
  if (!body.ok()) return body.status();
  for (absl::string_view line : absl::StrSplit(*body, '\n')) {
    if (line.size() > sample.size() && line.substr(0, sample.size()) == sample &&
        line[sample.size()] == ' ') {
      double v = 0;
      if (absl::SimpleAtod(line.substr(sample.size() + 1), &v)) return v;
    }
  }
  return absl::NotFoundError(absl::StrCat("metric ", sample, " not found"));
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(const Options& o) {
  // The test program embeds the client, so it chooses absl's mutex settings, as the daemons and
  // granary_bench do in main: deadlock detection off (Client::Create no longer does it), which
  // keeps the clients' timing as it was.
  common::ConfigureMutexDeadlockDetection();
  auto c = std::make_unique<Cluster>();
  c->options_ = o;
  char tmpl[] = "/tmp/granary_it_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  c->dir_ = tmpl;
  if (o.ha) {
    if (o.netns) return absl::InvalidArgumentError("Cluster: ha with netns is not built");
    if (!EtcdServer::Available()) {
      return absl::FailedPreconditionError(absl::StrCat(EtcdServer::kBinary, " is not installed"));
    }
    c->etcd_ = std::make_unique<EtcdServer>(c->dir_);
    if (absl::Status st = c->etcd_->Start(); !st.ok()) return st;
  }
  if (o.netns) {
    auto f = NetnsFabric::Create(o.nodes, o.netns_clients, o.tap_links);
    if (!f.ok()) return f.status();
    c->fabric_ = std::move(*f);
    absl::Status entered = c->fabric_->EnterClientHost(0);
    if (!entered.ok()) return entered;
  }
  // FreePort's port can be taken by another process before the master binds it: then the
  // master exits naming the port, and the cluster starts it again on fresh ports.
  absl::Status st;
  for (int attempt = 0; attempt < 3; ++attempt) {
    // A host of its own has every port free.
    c->rpc_port_ = o.netns ? 50051 : FreePort();
    c->http_port_ = o.netns ? 9003 : FreePort();
    st = c->StartMaster();
    if (st.ok() || c->master_ == nullptr || !ExitedOnABusyPort(*c->master_)) break;
  }
  if (!st.ok()) return st;
  if (o.ha) {
    // The first master is elected before the standby starts, so that master() is the leader.
    for (int i = 0; i < 200 && c->RoleAt(c->http_port_) != "active"; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (c->RoleAt(c->http_port_) != "active") {
      c->DumpLogs();
      return absl::UnavailableError("the first HA master was not elected");
    }
    c->standby_rpc_port_ = FreePort();
    c->standby_http_port_ = FreePort();
    if (absl::Status s = c->RestartStandby(); !s.ok()) return s;
  }
  for (int i = 0; i < o.nodes && st.ok(); ++i) st = c->StartNode();
  if (!st.ok()) return st;
  st = c->WaitForSegments(o.nodes * o.segments_per_node);
  if (!st.ok()) {
    c->DumpLogs();
    return st;
  }
  return c;
}

absl::Status Cluster::StartMaster() { return StartMasterOn(rpc_port_, http_port_, &master_); }

absl::Status Cluster::StartMasterOn(uint16_t rpc_port, uint16_t http_port,
                                    std::unique_ptr<Process>* slot) {
  const Options& o = options_;
  std::vector<std::string> argv = {
      BinDir() + "/granary_master",
      absl::StrCat("--rpc_port=", rpc_port),
      absl::StrCat("--metrics_port=", http_port),
      "--metrics_host=" + (fabric_ ? fabric_->Address("master") : "127.0.0.1"),
      absl::StrCat("--client_ttl=", o.client_ttl_sec),
      absl::StrCat("--put_start_timeout_sec=", o.put_start_timeout_sec),
      absl::StrCat("--default_kv_lease_ttl=", o.lease_ttl_ms)};
  if (o.ha) {
    argv.push_back("--enable_ha");
    argv.push_back("--etcd_endpoints=" + etcd_->Endpoint());
    argv.push_back(absl::StrCat("--ha_lease_ttl_sec=", o.ha_lease_ttl_sec));
  }
  for (const auto& f : o.master_flags) argv.push_back(f);
  auto m = Process::Start(OnHost("master", argv), HostEnv("master"),
                          absl::StrCat(dir_, "/master", master_seq_++, ".log"));
  if (!m.ok()) return m.status();
  *slot = std::move(*m);
  for (int i = 0; i < 200; ++i) {
    const bool up = fabric_ ? MasterHttpGet("/health").ok() : HttpGet(http_port, "/health").ok();
    if (up) return absl::OkStatus();
    if (!(*slot)->Running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  DumpLogs();
  return absl::UnavailableError("master did not come up");
}

std::string Cluster::RoleAt(uint16_t http_port) {
  absl::StatusOr<std::string> body = HttpGet(http_port, "/role");
  if (!body.ok()) return "";
  const size_t at = body->find("\"role\":\"");
  if (at == std::string::npos) return "";
  const size_t from = at + 8;
  return body->substr(from, body->find('"', from) - from);
}

absl::Status Cluster::RestartMaster() {
  master_->Kill(SIGKILL);
  master_->Wait();
  if (!options_.ha) return StartMaster();
  // The standby takes over once the leader's lease runs out (TTL after its last keepalive).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options_.ha_lease_ttl_sec + 15);
  while (RoleAt(standby_http_port_) != "active") {
    if (std::chrono::steady_clock::now() > deadline) {
      DumpLogs();
      return absl::DeadlineExceededError("the standby did not take over from the killed leader");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::swap(master_, standby_);
  std::swap(rpc_port_, standby_rpc_port_);
  std::swap(http_port_, standby_http_port_);
  return RestartStandby();
}

absl::Status Cluster::RestartStandby() {
  if (standby_ != nullptr && standby_->Running()) {
    standby_->Kill(SIGKILL);
    standby_->Wait();
  }
  return StartMasterOn(standby_rpc_port_, standby_http_port_, &standby_);
}

Cluster::~Cluster() {
  for (auto& n : nodes_) n.reset();
  master_.reset();
  standby_.reset();
  etcd_.reset();
  fabric_.reset();
  // A sanitizer build of a daemon reports into its log (and exits); the test that ran it fails
  // here even when the report came late, during shutdown.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".log") continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("ThreadSanitizer:") != std::string::npos ||
          line.find("AddressSanitizer:") != std::string::npos ||
          line.find("LeakSanitizer:") != std::string::npos ||
          line.find(": runtime error:") != std::string::npos) {
        ADD_FAILURE() << "sanitizer report in " << entry.path().string() << ": " << line;
        break;
      }
    }
  }
}

absl::Status Cluster::StartNode(int replace_index) {
  int seq = node_seq_++;
  std::string host =
      NetnsFabric::NodeHost(replace_index >= 0 ? replace_index : static_cast<int>(nodes_.size()));
  std::string address = "127.0.0.1";
  if (fabric_) {
    address = fabric_->Address(host);
    if (address.empty()) return absl::OutOfRangeError(absl::StrCat("no netns host ", host));
  }
  std::vector<std::string> argv = {BinDir() + "/granary_node",
                                   "--master=" + master_address(),
                                   "--host_segment_size=" + options_.node_segment_size,
                                   "--metrics_port=0",
                                   "--metrics_host=" + address,
                                   "--local_hostname=" + address};
  if (!options_.segment_file_dir.empty()) {
    const size_t index = replace_index >= 0 ? static_cast<size_t>(replace_index) : nodes_.size();
    argv.push_back(
        absl::StrCat("--segment_file=", options_.segment_file_dir, "/node", index, ".segment"));
  }
  argv.insert(argv.end(), options_.node_flags.begin(), options_.node_flags.end());
  auto p =
      Process::Start(OnHost(host, argv), HostEnv(host), absl::StrCat(dir_, "/node", seq, ".log"));
  if (!p.ok()) return p.status();
  if (replace_index >= 0) {
    nodes_[replace_index] = std::move(*p);
  } else {
    nodes_.push_back(std::move(*p));
  }
  return absl::OkStatus();
}

absl::Status Cluster::WaitForSegments(int count, double timeout_sec) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeout_sec * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    auto v = Metric("granary_master_segments");
    if (v.ok() && static_cast<int>(*v) == count) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("master did not reach ", count, " segments"));
}

std::string Cluster::master_address() const {
  if (etcd_ != nullptr) return "etcd://" + etcd_->Endpoint();
  return absl::StrCat(fabric_ ? fabric_->Address("master") : "127.0.0.1", ":", rpc_port_);
}

std::vector<std::string> Cluster::OnHost(const std::string& host,
                                         const std::vector<std::string>& argv) {
  return fabric_ ? fabric_->Wrap(host, argv) : argv;
}

std::vector<std::string> Cluster::HostEnv(const std::string& host) const {
  std::vector<std::string> env = options_.env;
  if (fabric_) {
    for (auto& e : fabric_->Env(host)) env.push_back(e);
  }
  return env;
}

absl::StatusOr<std::string> Cluster::MasterHttpGet(const std::string& path) {
  if (!fabric_) return HttpGet(http_port_, path);
  absl::StatusOr<std::string> r = absl::UnknownError("not run");
  absl::Status st =
      fabric_->RunIn("master", [&] { r = HttpGet(fabric_->Address("master"), http_port_, path); });
  if (!st.ok()) return st;
  return r;
}

absl::StatusOr<double> Cluster::Metric(const std::string& sample) {
  if (!fabric_) return ScrapeMetric(http_port_, sample);
  absl::StatusOr<double> r = absl::UnknownError("not run");
  absl::Status st = fabric_->RunIn(
      "master", [&] { r = ScrapeMetric(fabric_->Address("master"), http_port_, sample); });
  if (!st.ok()) return st;
  return r;
}

ClientOptions Cluster::ClientOpts(const std::string& tenant) const {
  ClientOptions o;
  o.master_server_address = master_address();
  o.tenant_id = tenant;
  o.transfer_timeout_ms = 10'000;
  return o;
}

absl::StatusOr<std::unique_ptr<Client>> Cluster::NewClient(const std::string& tenant) const {
  return Client::Create(ClientOpts(tenant));
}

void Cluster::DumpLogs() const {
  auto dump = [](const std::string& name, const Process* p) {
    if (p == nullptr) return;
    std::string log = p->Log();
    if (log.size() > 20000) log = "..." + log.substr(log.size() - 20000);
    std::cerr << "===== " << name << " (" << p->log_path() << ") =====\n" << log << "\n";
  };
  dump("master", master_.get());
  for (size_t i = 0; i < nodes_.size(); ++i) dump(absl::StrCat("node", i), nodes_[i].get());
}

std::string SegmentFileDir(const std::string& prefix, uint64_t bytes) {
  std::error_code ec;
  const std::filesystem::space_info shm = std::filesystem::space("/dev/shm", ec);
  const std::string root = !ec && shm.available >= bytes + (64u << 20) ? "/dev/shm" : "/tmp";
  std::string tmpl = absl::StrCat(root, "/", prefix, "_XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

std::string MakeValue(const std::string& key, uint64_t version, size_t size) {
  std::string v(size, '\0');
  std::mt19937_64 gen(std::hash<std::string>{}(key) ^ (version * 0x9E3779B97F4A7C15ULL));
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t r = gen();
    std::memcpy(&v[i], &r, 8);
  }
  for (; i < size; ++i) v[i] = static_cast<char>(gen());
  return v;
}

}  // namespace granary::testing
