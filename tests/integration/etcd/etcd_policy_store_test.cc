// The etcd policy store against a real etcd (Debian's etcd-server, 3.4) started as a child
// process. Skipped when /usr/bin/etcd is not installed.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "master/tenant/policy_store.h"
#include "tests/free_port.h"
#include "tests/integration/etcd/etcd_server.h"

namespace granary::master::tenant {
namespace {

using ::granary::testing::EtcdServer;
constexpr const char* kClusterId = "it_cluster";

// A port nothing listens on (bound and released).
int FreePort() { return granary::testing::PickFreePort(); }

// tenant-b has a client token hash, so every round trip also carries token_sha256.
Policy TwoTenants() {
  return Policy{{{"tenant-a", 200ull << 30, 200000},
                 {"tenant-b", 500ull << 30, std::nullopt,
                  "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}}};
}

// One single-member etcd per test, killed in TearDown.
class EtcdPolicyStoreIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::Available()) {
      GTEST_SKIP() << EtcdServer::kBinary
                   << " is not installed (apt-get install etcd-server); skipping";
    }
    std::string tmpl = ::testing::TempDir() + "granary_etcd_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    etcd_ = std::make_unique<EtcdServer>(dir_);
    absl::Status st = etcd_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << etcd_->Log();
  }

  void TearDown() override {
    etcd_.reset();
    if (!dir_.empty()) {
      EXPECT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
    }
  }

  void KillEtcd() { etcd_->Kill(); }
  std::string Endpoint() const { return etcd_->Endpoint(); }

  std::unique_ptr<PolicyStore> NewStore() {
    auto store = NewEtcdPolicyStore(Endpoint(), kClusterId, 1000);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  std::string dir_;
  std::unique_ptr<EtcdServer> etcd_;
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
  absl::StatusOr<std::optional<std::string>> value = etcd_->Get(key);
  ASSERT_TRUE(value.ok()) << value.status();
  ASSERT_TRUE(value->has_value()) << key << " is not in etcd";
  absl::StatusOr<int64_t> keys = etcd_->CountPrefix("granary/");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, 1);
  EXPECT_EQ(**value, SerializePolicy(TwoTenants()));
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

// The test harness itself: a port taken between the pick and etcd's start (by a test running
// beside this one) makes the first start pick new ports instead of failing, or of taking
// another server's /health for etcd's.
TEST(EtcdServerHarness, FirstStartPicksNewPortsWhenOneWasTaken) {
  if (!EtcdServer::Available()) GTEST_SKIP() << EtcdServer::kBinary << " is not installed";
  std::string tmpl = ::testing::TempDir() + "granary_etcd_taken_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  EtcdServer etcd(tmpl);
  const int taken = etcd.client_port();
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(taken));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  ASSERT_EQ(listen(fd, 4), 0);
  absl::Status st = etcd.Start();
  close(fd);
  ASSERT_TRUE(st.ok()) << st << "\n" << etcd.Log();
  EXPECT_NE(etcd.client_port(), taken);
  EXPECT_NE(etcd.Log().find("address already in use"), std::string::npos);
  ASSERT_TRUE(etcd.Put("k", "v").ok());
  auto v = etcd.Get("k");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->value_or(""), "v");
  etcd.Kill();
  rmdir((tmpl + "/data").c_str());
}

}  // namespace
}  // namespace granary::master::tenant
