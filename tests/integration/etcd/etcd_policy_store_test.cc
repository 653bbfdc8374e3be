// The etcd policy store against a real etcd (Debian's etcd-server, 3.4) started as a child
// process. Skipped when /usr/bin/etcd is not installed.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "master/tenant/policy_store.h"
#include "nlohmann/json.hpp"

namespace granary::master::tenant {
namespace {

constexpr const char* kEtcd = "/usr/bin/etcd";
constexpr const char* kClusterId = "it_cluster";

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

Policy TwoTenants() {
  return Policy{{{"tenant-a", 200ull << 30, 200000}, {"tenant-b", 500ull << 30, std::nullopt}}};
}

// One single-member etcd per test, killed in TearDown.
class EtcdPolicyStoreIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kEtcd, X_OK) != 0) {
      GTEST_SKIP() << kEtcd << " is not installed (apt-get install etcd-server); skipping";
    }
    std::string tmpl = ::testing::TempDir() + "granary_etcd_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    client_port_ = FreePort();
    const int peer_port = FreePort();
    const std::string client_url = absl::StrCat("http://127.0.0.1:", client_port_);
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port);
    std::vector<std::string> args = {kEtcd,
                                     "--name=granary-test",
                                     "--data-dir=" + dir_ + "/data",
                                     "--listen-client-urls=" + client_url,
                                     "--advertise-client-urls=" + client_url,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=granary-test=" + peer_url};
    const std::string log = dir_ + "/etcd.log";
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(kEtcd, argv.data());
      _exit(127);
    }
    ASSERT_TRUE(WaitHealthy()) << "etcd did not become healthy; log in " << log;
  }

  void TearDown() override {
    KillEtcd();
    if (!dir_.empty()) {
      EXPECT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
    }
  }

  bool WaitHealthy() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      httplib::Client cli("127.0.0.1", client_port_);
      cli.set_connection_timeout(1, 0);
      if (auto res = cli.Get("/health");
          res && res->status == 200 && res->body.find("true") != std::string::npos) {
        return true;
      }
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  void KillEtcd() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  std::string Endpoint() const { return absl::StrCat("127.0.0.1:", client_port_); }

  std::unique_ptr<PolicyStore> NewStore() {
    auto store = NewEtcdPolicyStore(Endpoint(), kClusterId, 1000);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  std::string dir_;
  int client_port_ = 0;
  pid_t pid_ = -1;
};

TEST_F(EtcdPolicyStoreIntegrationTest, MissingKeyIsEmptyPolicy) {
  auto store = NewStore();
  absl::StatusOr<Policy> loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->tenants.empty());
}

TEST_F(EtcdPolicyStoreIntegrationTest, SaveThenLoad) {
  auto store = NewStore();
  ASSERT_TRUE(store->Save(TwoTenants()).ok());
  absl::StatusOr<Policy> loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, TwoTenants());
  ASSERT_TRUE(store->Save(Policy{}).ok());  // an empty policy is stored, not deleted
  loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->tenants.empty());
}

TEST_F(EtcdPolicyStoreIntegrationTest, KeyLayout) {
  auto store = NewStore();
  EXPECT_EQ(store->Describe(),
            absl::StrCat("etcd:", Endpoint(), "/granary/", kClusterId, "/tenant_quota_policy"));
  ASSERT_TRUE(store->Save(TwoTenants()).ok());
  const std::string key = absl::StrCat("granary/", kClusterId, "/tenant_quota_policy");
  httplib::Client cli("127.0.0.1", client_port_);
  auto res = cli.Post("/v3/kv/range", nlohmann::json{{"key", absl::Base64Escape(key)}}.dump(),
                      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  nlohmann::json reply = nlohmann::json::parse(res->body);
  ASSERT_EQ(reply["kvs"].size(), 1u) << res->body;
  std::string got_key, value;
  ASSERT_TRUE(absl::Base64Unescape(reply["kvs"][0]["key"].get<std::string>(), &got_key));
  ASSERT_TRUE(absl::Base64Unescape(reply["kvs"][0]["value"].get<std::string>(), &value));
  EXPECT_EQ(got_key, key);
  EXPECT_EQ(value, SerializePolicy(TwoTenants()));
}

TEST_F(EtcdPolicyStoreIntegrationTest, SecondMasterSeesChanges) {
  auto first = NewStore();
  auto second = NewStore();
  ASSERT_TRUE(first->Save(TwoTenants()).ok());
  absl::StatusOr<Policy> seen = second->Load();
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, TwoTenants());
  Policy changed = TwoTenants();
  changed.tenants.pop_back();
  ASSERT_TRUE(second->Save(changed).ok());
  seen = first->Load();
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, changed);
}

TEST_F(EtcdPolicyStoreIntegrationTest, OtherClusterIsSeparate) {
  auto mine = NewStore();
  auto other = NewEtcdPolicyStore(Endpoint(), "other_cluster", 1000);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(mine->Save(TwoTenants()).ok());
  absl::StatusOr<Policy> loaded = (*other)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->tenants.empty());
}

TEST_F(EtcdPolicyStoreIntegrationTest, DeadEndpointFirstStillWorks) {
  auto store =
      NewEtcdPolicyStore(absl::StrCat("127.0.0.1:", FreePort(), ",", Endpoint()), kClusterId, 1000);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Save(TwoTenants()).ok());
  absl::StatusOr<Policy> loaded = (*store)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, TwoTenants());
}

TEST_F(EtcdPolicyStoreIntegrationTest, KilledEtcdIsUnavailableQuickly) {
  auto store = NewStore();
  ASSERT_TRUE(store->Save(TwoTenants()).ok());
  KillEtcd();
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Policy> loaded = store->Load();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kUnavailable) << loaded.status();
  EXPECT_NE(loaded.status().message().find(Endpoint()), absl::string_view::npos) << loaded.status();
  start = std::chrono::steady_clock::now();
  EXPECT_EQ(store->Save(Policy{}).code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace granary::master::tenant
