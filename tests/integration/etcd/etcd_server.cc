#include "tests/integration/etcd/etcd_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/free_port.h"

extern char** environ;

namespace granary::testing {
int FreeLoopbackPort() { return PickFreePort(); }

bool EtcdServer::Available() { return access(kBinary, X_OK) == 0; }

EtcdServer::EtcdServer(std::string dir) : dir_(std::move(dir)) {
  client_port_ = FreeLoopbackPort();
  do {
    peer_port_ = FreeLoopbackPort();
  } while (peer_port_ == client_port_);
}

EtcdServer::~EtcdServer() { Kill(); }

std::string EtcdServer::Endpoint() const { return absl::StrCat("127.0.0.1:", client_port_); }

std::string EtcdServer::Log() const {
  std::ifstream in(log_path());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status EtcdServer::Start(int timeout_sec) {
  // The ports were free when picked, but another test running beside this one may have taken
  // one since: on its first start, etcd then exits with "address already in use", and new
  // ports are picked. A restart keeps its ports (clients hold the endpoint).
  for (int attempt = 0;; ++attempt) {
    const size_t log_before = Log().size();
    absl::Status st = StartOnce(timeout_sec);
    if (st.ok() || started_once_ || attempt == 4 ||
        Log().find("address already in use", log_before) == std::string::npos) {
      if (st.ok()) started_once_ = true;
      return st;
    }
    client_port_ = FreeLoopbackPort();
    do {
      peer_port_ = FreeLoopbackPort();
    } while (peer_port_ == client_port_);
  }
}

absl::Status EtcdServer::StartOnce(int timeout_sec) {
  if (pid_ > 0) return absl::FailedPreconditionError("etcd is already running");
  if (client_port_ == 0 || peer_port_ == 0) return absl::InternalError("no free port for etcd");
  const std::string client_url = absl::StrCat("http://127.0.0.1:", client_port_);
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port_);
  std::vector<std::string> args = {kBinary,
                                   "--name=granary-test",
                                   "--data-dir=" + dir_ + "/data",
                                   "--listen-client-urls=" + client_url,
                                   "--advertise-client-urls=" + client_url,
                                   "--listen-peer-urls=" + peer_url,
                                   "--initial-advertise-peer-urls=" + peer_url,
                                   "--initial-cluster=granary-test=" + peer_url};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // posix_spawn, not fork: the test process has threads (clients, HTTP), and a restart happens
  // while they run.
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path().c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, kBinary, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return absl::InternalError(absl::StrCat("spawning ", kBinary, ": ", strerror(rc)));
  pid_ = pid;

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_sec);
  while (std::chrono::steady_clock::now() < deadline) {
    // Whether etcd is still up comes first: another server that took the port (a master's
    // admin HTTP, say) can answer /health too.
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::UnavailableError(
          absl::StrCat("etcd exited during startup (status ", st, "); log in ", log_path()));
    }
    httplib::Client cli("127.0.0.1", client_port_);
    cli.set_connection_timeout(1, 0);
    cli.set_read_timeout(2, 0);
    if (auto res = cli.Get("/health");
        res && res->status == 200 && res->body.find("\"health\":\"true\"") != std::string::npos) {
      return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Kill();
  return absl::DeadlineExceededError(
      absl::StrCat("etcd did not become healthy in ", timeout_sec, " s; log in ", log_path()));
}

void EtcdServer::Kill() {
  if (pid_ > 0) {
    kill(pid_, SIGCONT);  // a stopped etcd is killed too, but let it go first
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

absl::Status EtcdServer::Delete(const std::string& key) const {
  return Post("/v3/kv/deleterange", nlohmann::json{{"key", absl::Base64Escape(key)}}.dump())
      .status();
}

void EtcdServer::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

absl::StatusOr<std::string> EtcdServer::Post(const std::string& path,
                                             const std::string& body) const {
  httplib::Client cli("127.0.0.1", client_port_);
  cli.set_connection_timeout(2, 0);
  cli.set_read_timeout(5, 0);
  auto res = cli.Post(path, body, "application/json");
  if (!res) {
    return absl::UnavailableError(
        absl::StrCat("etcd ", path, " on ", Endpoint(), ": ", httplib::to_string(res.error())));
  }
  if (res->status != 200) {
    return absl::InternalError(
        absl::StrCat("etcd ", path, " on ", Endpoint(), ": HTTP ", res->status, " ", res->body));
  }
  return res->body;
}

absl::StatusOr<std::optional<std::string>> EtcdServer::Get(const std::string& key) const {
  auto body = Post("/v3/kv/range", nlohmann::json{{"key", absl::Base64Escape(key)}}.dump());
  if (!body.ok()) return body.status();
  nlohmann::json reply = nlohmann::json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object()) return absl::InternalError("etcd range reply is not JSON: " + *body);
  // The gateway leaves out empty fields: no "kvs" means no such key, no "value" means "".
  if (!reply.contains("kvs") || reply["kvs"].empty()) return std::optional<std::string>();
  const nlohmann::json& kv = reply["kvs"][0];
  std::string got_key, value;
  if (!absl::Base64Unescape(kv.value("key", ""), &got_key) || got_key != key) {
    return absl::InternalError("etcd range returned another key: " + *body);
  }
  if (!absl::Base64Unescape(kv.value("value", ""), &value)) {
    return absl::InternalError("etcd value is not base64: " + *body);
  }
  return std::optional<std::string>(std::move(value));
}

absl::StatusOr<int64_t> EtcdServer::CountPrefix(const std::string& prefix) const {
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) {
    end = std::string(1, '\0');  // every key
  } else {
    end.back() = static_cast<char>(end.back() + 1);
  }
  auto body = Post("/v3/kv/range", nlohmann::json{{"key", absl::Base64Escape(prefix)},
                                                  {"range_end", absl::Base64Escape(end)},
                                                  {"count_only", true}}
                                       .dump());
  if (!body.ok()) return body.status();
  nlohmann::json reply = nlohmann::json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object()) return absl::InternalError("etcd range reply is not JSON: " + *body);
  // int64 fields come back as strings; an absent count is 0.
  if (!reply.contains("count")) return 0;
  const nlohmann::json& c = reply["count"];
  if (c.is_number_integer()) return c.get<int64_t>();
  int64_t n = 0;
  if (c.is_string() && absl::SimpleAtoi(c.get<std::string>(), &n)) return n;
  return absl::InternalError("etcd range count is not a number: " + *body);
}

absl::Status EtcdServer::Put(const std::string& key, const std::string& value) const {
  return Post("/v3/kv/put",
              nlohmann::json{{"key", absl::Base64Escape(key)}, {"value", absl::Base64Escape(value)}}
                  .dump())
      .status();
}

}  // namespace granary::testing
