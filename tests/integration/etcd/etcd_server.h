#pragma once

// A single-member etcd (Debian's etcd-server, /usr/bin/etcd) started as a child process for
// integration tests, plus raw v3 JSON-gateway reads and writes of single keys, so tests can
// look at and tamper with what the code under test stored.

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace granary::testing {

// A free TCP port on 127.0.0.1 (bound and released): nothing listens on it.
int FreeLoopbackPort();

class EtcdServer {
 public:
  static constexpr const char* kBinary = "/usr/bin/etcd";
  // Whether /usr/bin/etcd is installed and executable (tests GTEST_SKIP otherwise).
  static bool Available();

  // Picks free client and peer ports on 127.0.0.1 and a data dir under `dir`; starts nothing.
  explicit EtcdServer(std::string dir);
  // Kills etcd (SIGKILL) if it is running. Leaves `dir` alone (the caller owns it).
  ~EtcdServer();
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // Starts etcd (again, after Kill: same ports, same data dir) and waits until its /health
  // says true. The log goes to <dir>/etcd.log (appended on restarts). On the first start, a
  // port taken meanwhile by another process makes it pick new ones and try again.
  absl::Status Start(int timeout_sec = 20);
  // SIGKILL and reap; no-op when not running.
  void Kill();
  // Sends `sig` (SIGSTOP, SIGCONT: a hung etcd) when running.
  void Signal(int sig);
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  int client_port() const { return client_port_; }
  // "127.0.0.1:<client port>", as --tenant_quota_connector_uri / NewEtcdPolicyStore take it.
  std::string Endpoint() const;
  std::string log_path() const { return dir_ + "/etcd.log"; }
  std::string Log() const;

  // Raw v3 range of one key: its value, or nullopt when the key is absent.
  absl::StatusOr<std::optional<std::string>> Get(const std::string& key) const;
  // Number of keys starting with `prefix` (a v3 prefix range, count_only).
  absl::StatusOr<int64_t> CountPrefix(const std::string& prefix) const;
  // Raw v3 put of one key.
  absl::Status Put(const std::string& key, const std::string& value) const;
  // Raw v3 delete of one key.
  absl::Status Delete(const std::string& key) const;

 private:
  absl::StatusOr<std::string> Post(const std::string& path, const std::string& body) const;
  absl::Status StartOnce(int timeout_sec);

  std::string dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
  bool started_once_ = false;
};

}  // namespace granary::testing
