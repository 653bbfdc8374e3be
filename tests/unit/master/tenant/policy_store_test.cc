#include "master/tenant/policy_store.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/free_port.h"

namespace granary::master::tenant {
namespace {

// Every field set somewhere, so a round trip through a store shows that each is carried.
// Every field set somewhere (tenant-b: a token, pool_spill and a default tier), so each store
// round-trips them.
Policy SmallPolicy() {
  return Policy{{{"tenant-a", 200ull << 30, 200000},
                 {"tenant-b", 1ull << 30, std::nullopt,
                  "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", true,
                  common::TierPreference::kAny}}};
}

// A policy whose YAML is ~40 KB, so a torn write would be visible.
Policy BigPolicy() {
  Policy policy;
  for (int i = 0; i < 1000; ++i) {
    policy.tenants.push_back({absl::StrCat("tenant-", 1000 + i), 1ull + i, std::nullopt});
  }
  return policy;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") {
      names.push_back(e->d_name);
    }
  }
  if (d) closedir(d);
  return names;
}

class FilePolicyStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "granary_policy_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/tenant_quotas.yaml";
  }
  void TearDown() override { ASSERT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0); }

  std::string dir_;
  std::string path_;
};

TEST_F(FilePolicyStoreTest, SaveThenLoad) {
  auto store = NewFilePolicyStore(path_);
  EXPECT_EQ(store->Describe(), "file:" + path_);
  ASSERT_TRUE(store->Save(SmallPolicy()).ok());
  absl::StatusOr<Policy> loaded = store->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, SmallPolicy());
  ASSERT_TRUE(store->Save(Policy{}).ok());
  loaded = NewFilePolicyStore(path_)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->tenants.empty());
  EXPECT_EQ(ListDir(dir_), std::vector<std::string>{"tenant_quotas.yaml"});  // no tmp left
}

TEST_F(FilePolicyStoreTest, LoadMissingFileIsNotFound) {
  absl::StatusOr<Policy> loaded = NewFilePolicyStore(path_)->Load();
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(loaded.status().message().find(path_), absl::string_view::npos) << loaded.status();
}

TEST_F(FilePolicyStoreTest, LoadBadFileNamesPath) {
  std::ofstream(path_) << "version: 1\ntenants:\n  - name: t\n    quota: 0\n";
  absl::StatusOr<Policy> loaded = NewFilePolicyStore(path_)->Load();
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loaded.status().message().rfind(absl::StrCat("policy file '", path_, "': "), 0), 0u)
      << loaded.status();
  EXPECT_NE(loaded.status().message().find("quota"), absl::string_view::npos);
}

TEST_F(FilePolicyStoreTest, SaveRefusesInvalidPolicy) {
  auto store = NewFilePolicyStore(path_);
  ASSERT_TRUE(store->Save(SmallPolicy()).ok());
  absl::Status st = store->Save(Policy{{{"_probe", 1, std::nullopt}}});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*store->Load(), SmallPolicy());
}

TEST_F(FilePolicyStoreTest, SaveIntoMissingDirectoryFails) {
  auto store = NewFilePolicyStore(dir_ + "/no/such/dir/q.yaml");
  absl::Status st = store->Save(SmallPolicy());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no/such/dir/q.yaml"), absl::string_view::npos) << st;
}

TEST_F(FilePolicyStoreTest, SaveIntoUnwritableDirectoryLeavesOldFile) {
  if (geteuid() == 0) GTEST_SKIP() << "running as root: directory permissions do not apply";
  auto store = NewFilePolicyStore(path_);
  ASSERT_TRUE(store->Save(SmallPolicy()).ok());
  const std::string before = ReadFile(path_);
  ASSERT_EQ(chmod(dir_.c_str(), 0555), 0);
  absl::Status st = store->Save(BigPolicy());
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_EQ(ReadFile(path_), before);
}

// A write that fails half way (file size limit: EFBIG, works as root too) leaves the old file
// and no temporary file behind.
TEST_F(FilePolicyStoreTest, FailedWriteLeavesOldFile) {
  auto store = NewFilePolicyStore(path_);
  ASSERT_TRUE(store->Save(SmallPolicy()).ok());
  const std::string before = ReadFile(path_);
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  sighandler_t old_handler = signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status st = store->Save(BigPolicy());
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path_), absl::string_view::npos) << st;
  EXPECT_EQ(ReadFile(path_), before);
  EXPECT_EQ(ListDir(dir_), std::vector<std::string>{"tenant_quotas.yaml"});
}

// A failed rename (the target is a non-empty directory) removes the temporary file.
TEST_F(FilePolicyStoreTest, FailedRenameRemovesTemporary) {
  ASSERT_EQ(mkdir(path_.c_str(), 0755), 0);
  std::ofstream(path_ + "/keep") << "x";
  absl::Status st = NewFilePolicyStore(path_)->Save(SmallPolicy());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rename"), absl::string_view::npos) << st;
  EXPECT_EQ(ListDir(dir_), std::vector<std::string>{"tenant_quotas.yaml"});
}

TEST_F(FilePolicyStoreTest, NeverHalfWritten) {
  auto store = NewFilePolicyStore(path_);
  ASSERT_TRUE(store->Save(SmallPolicy()).ok());
  std::atomic<bool> done{false};
  std::atomic<int> loads{0};
  std::thread reader([&] {
    auto reader_store = NewFilePolicyStore(path_);
    const Policy small = SmallPolicy(), big = BigPolicy();
    while (!done.load()) {
      absl::StatusOr<Policy> loaded = reader_store->Load();
      EXPECT_TRUE(loaded.ok()) << loaded.status();
      EXPECT_TRUE(!loaded.ok() || *loaded == small || *loaded == big);
      loads.fetch_add(1);
    }
  });
  const Policy big = BigPolicy();
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(store->Save(i % 2 ? SmallPolicy() : big).ok());
  }
  while (loads.load() < 20) std::this_thread::yield();
  done = true;
  reader.join();
}

// ---- etcd store without etcd: endpoint syntax, unreachable endpoints, a fake gateway. ----

int FreePort() { return granary::testing::PickFreePort(); }

TEST(EtcdPolicyStoreTest, RejectsBadEndpoints) {
  for (const char* bad : {"", "host", "host:", ":2379", "host:abc", "host:0", "host:70000",
                          "a:1,,b:2", "https://h:1", "a b:1", "a:b:1", "[::1", "h/x:1"}) {
    auto store = NewEtcdPolicyStore(bad, "c1");
    EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  auto store = NewEtcdPolicyStore("127.0.0.1:2379,bad", "c1");
  EXPECT_NE(store.status().message().find("'bad'"), absl::string_view::npos) << store.status();
  EXPECT_FALSE(NewEtcdPolicyStore("127.0.0.1:2379", "").ok());
  EXPECT_FALSE(NewEtcdPolicyStore("127.0.0.1:2379", "a/b").ok());
  EXPECT_FALSE(NewEtcdPolicyStore("127.0.0.1:2379", "c1", 0).ok());
}

TEST(EtcdPolicyStoreTest, AcceptsGoodEndpoints) {
  auto store = NewEtcdPolicyStore("127.0.0.1:2379, http://etcd-1:2379,[::1]:2379", "c1");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Describe(),
            "etcd:127.0.0.1:2379,http://etcd-1:2379,[::1]:2379/granary/c1/tenant_quota_policy");
}

TEST(EtcdPolicyStoreTest, UnreachableIsUnavailableAndNamesEndpoints) {
  const std::string a = absl::StrCat("127.0.0.1:", FreePort());
  const std::string b = absl::StrCat("127.0.0.1:", FreePort());
  auto store = NewEtcdPolicyStore(a + "," + b, "c1", 500);
  ASSERT_TRUE(store.ok()) << store.status();
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Policy> loaded = (*store)->Load();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(loaded.status().message().find(a), absl::string_view::npos) << loaded.status();
  EXPECT_NE(loaded.status().message().find(b), absl::string_view::npos) << loaded.status();
  EXPECT_EQ((*store)->Save(SmallPolicy()).code(), absl::StatusCode::kUnavailable);
}

// Just enough of etcd's JSON gateway: range and put on one in-memory map, or 503 for all.
class FakeGateway {
 public:
  explicit FakeGateway(bool broken) {
    server_.Post(
        "/v3/kv/range", [this, broken](const httplib::Request& req, httplib::Response& res) {
          if (broken) return Fail(res);
          granary::common::MutexLock lock(&mu_);
          auto it = kv_.find(nlohmann::json::parse(req.body)["key"].get<std::string>());
          nlohmann::json reply = {{"header", {{"revision", "1"}}}};  // no "kvs" when absent
          if (it != kv_.end()) reply["kvs"] = {{{"key", it->first}, {"value", it->second}}};
          res.set_content(reply.dump(), "application/json");
        });
    server_.Post("/v3/kv/put", [this, broken](const httplib::Request& req, httplib::Response& res) {
      if (broken) return Fail(res);
      nlohmann::json body = nlohmann::json::parse(req.body);
      granary::common::MutexLock lock(&mu_);
      kv_[body["key"].get<std::string>()] = body["value"].get<std::string>();
      res.set_content(R"({"header":{}})", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeGateway() {
    server_.stop();
    thread_.join();
  }
  std::string endpoint() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  static void Fail(httplib::Response& res) {
    res.status = 503;
    res.set_content(R"({"error":"etcdserver: no leader","code":14,"message":"no leader"})",
                    "application/json");
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  granary::common::Mutex mu_;
  std::map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);  // base64 key -> base64 value
};

TEST(EtcdPolicyStoreTest, FakeGatewayRoundTripAndFailover) {
  FakeGateway broken(/*broken=*/true);
  FakeGateway good(/*broken=*/false);
  auto store = NewEtcdPolicyStore(broken.endpoint() + "," + good.endpoint(), "c1");
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Policy> loaded = (*store)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();  // absent key: empty policy
  EXPECT_TRUE(loaded->tenants.empty());
  ASSERT_TRUE((*store)->Save(SmallPolicy()).ok());
  loaded = (*store)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, SmallPolicy());

  auto only_broken = NewEtcdPolicyStore(broken.endpoint(), "c1");
  ASSERT_TRUE(only_broken.ok());
  absl::StatusOr<Policy> failed = (*only_broken)->Load();
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find("no leader"), absl::string_view::npos)
      << failed.status();
}

}  // namespace
}  // namespace granary::master::tenant
