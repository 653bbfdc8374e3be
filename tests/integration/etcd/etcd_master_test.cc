// Real granary_master processes with --tenant_quota_connector_type=etcd against a real etcd
// (Debian's etcd-server, 3.4, started as a child process): an empty key is an empty policy,
// admin writes land under granary/<cluster_id>/tenant_quota_policy, a second master picks up
// changes, and an unreachable etcd or a bad document leaves the last good policy in force and
// says so on /health and /metrics. Skipped when /usr/bin/etcd is not installed.

#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "granary/client.h"
#include "master/tenant/policy.h"
#include "tests/integration/cluster.h"
#include "tests/integration/etcd/admin_request.h"
#include "tests/integration/etcd/etcd_server.h"

namespace granary::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace tenant = ::granary::master::tenant;

constexpr uint64_t kMiB = 1 << 20;

Reply PutQuota(uint16_t port, const std::string& tenant_id, uint64_t bytes) {
  return Request(port, "PUT", "/api/v1/tenant_quotas?tenant_id=" + tenant_id,
                 json{{"requested_quota_bytes", bytes}}.dump());
}

// tenant_id -> requested_quota_bytes of every tenant the master lists; nullopt if the list
// request failed.
std::optional<std::map<std::string, uint64_t>> ListQuotas(uint16_t port) {
  Reply r = Request(port, "GET", "/api/v1/tenant_quotas");
  if (r.status != 200 || !r.body.is_object() || !r.body["data"].is_array()) return std::nullopt;
  std::map<std::string, uint64_t> out;
  for (const json& t : r.body["data"]) {
    out[t["tenant_id"].get<std::string>()] = t["requested_quota_bytes"].get<uint64_t>();
  }
  return out;
}

// The requested quota of one tenant as the master reports it; 0 when it does not know it.
uint64_t RequestedQuota(uint16_t port, const std::string& tenant_id) {
  Reply r = Request(port, "GET", "/api/v1/tenant_quotas?tenant_id=" + tenant_id);
  if (r.status != 200) return 0;
  return r.body["data"]["requested_quota_bytes"].get<uint64_t>();
}

json Health(uint16_t port) {
  Reply r = Request(port, "GET", "/health");
  return r.status == 200 ? r.body : json();
}

bool StoreOk(const json& health) {
  return health.is_object() && health.contains("policy_store_ok") &&
         health["policy_store_ok"].is_boolean() && health["policy_store_ok"].get<bool>();
}

bool StoreDown(const json& health) {
  return health.is_object() && health.contains("policy_store_ok") &&
         health["policy_store_ok"].is_boolean() && !health["policy_store_ok"].get<bool>();
}

class EtcdMasterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdServer::Available()) {
      GTEST_SKIP() << EtcdServer::kBinary
                   << " is not installed (apt-get install etcd-server); skipping";
    }
    char tmpl[] = "/tmp/granary_etcd_master_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    etcd_ = std::make_unique<EtcdServer>(dir_);
    absl::Status st = etcd_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << etcd_->Log();
    // Unique per test and per run, so a leftover key could never be mistaken for ours.
    cluster_id_ = absl::StrCat(
        "it_", ::testing::UnitTest::GetInstance()->current_test_info()->name(), "_", getpid());
    policy_key_ = absl::StrCat("granary/", cluster_id_, "/tenant_quota_policy");
  }

  void TearDown() override {
    if (HasFailure()) {
      for (auto& c : clusters_) c->DumpLogs();
      if (etcd_) std::cerr << "===== etcd (" << etcd_->log_path() << ") =====\n" << etcd_->Log();
    }
    std::vector<std::string> dirs;
    for (auto& c : clusters_) dirs.push_back(c->dir());
    clients_.clear();
    clusters_.clear();  // kills masters and nodes
    etcd_.reset();      // kills etcd
    if (!dir_.empty()) dirs.push_back(dir_);
    for (const std::string& d : dirs) {
      EXPECT_EQ(system(("rm -rf '" + d + "'").c_str()), 0) << d;
    }
  }

  // A master (and `nodes` nodes) with the etcd connector on this test's etcd and cluster id.
  Cluster* StartMaster(int nodes = 0) {
    Cluster::Options o;
    o.nodes = nodes;
    o.node_segment_size = "64MB";
    o.lease_ttl_ms = 60'000;
    o.master_flags = {"--enable_multi_tenants", "--tenant_quota_connector_type=etcd",
                      "--tenant_quota_connector_uri=" + etcd_->Endpoint(),
                      "--cluster_id=" + cluster_id_};
    auto c = Cluster::Start(o);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    clusters_.push_back(std::move(*c));
    return clusters_.back().get();
  }

  Client* NewClient(Cluster* cluster, const std::string& tenant_id) {
    auto c = cluster->NewClient(tenant_id);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    clients_.push_back(std::move(*c));
    return clients_.back().get();
  }

  // The policy document under this test's key, parsed; nullopt when the key is absent.
  std::optional<tenant::Policy> StoredPolicy() {
    auto value = etcd_->Get(policy_key_);
    EXPECT_TRUE(value.ok()) << value.status();
    if (!value.ok() || !value->has_value()) return std::nullopt;
    auto policy = tenant::ParsePolicy(**value);
    EXPECT_TRUE(policy.ok()) << policy.status() << "\n" << **value;
    if (!policy.ok()) return std::nullopt;
    return *policy;
  }

  std::string dir_;
  std::unique_ptr<EtcdServer> etcd_;
  std::string cluster_id_;
  std::string policy_key_;
  std::vector<std::unique_ptr<Cluster>> clusters_;
  std::vector<std::unique_ptr<Client>> clients_;
};

TEST_F(EtcdMasterTest, EmptyEtcdIsAnEmptyPolicyAndAdminWritesLandUnderTheClusterKey) {
  Cluster* m = StartMaster();
  ASSERT_NE(m, nullptr);
  const uint16_t port = m->master_http_port();

  Reply list = Request(port, "GET", "/api/v1/tenant_quotas");
  ASSERT_EQ(list.status, 200) << list.body.dump();
  EXPECT_EQ(list.body, json({{"success", true}, {"data", json::array()}})) << list.body.dump();
  json health = Health(port);
  EXPECT_TRUE(StoreOk(health)) << health.dump();
  EXPECT_EQ(health["policy_store"], absl::StrCat("etcd:", etcd_->Endpoint(), "/", policy_key_))
      << health.dump();
  // Starting and reading wrote nothing.
  auto keys = etcd_->CountPrefix("granary/");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, 0);

  Reply put = PutQuota(port, "tenant-a", kMiB);
  ASSERT_EQ(put.status, 200) << put.body.dump();
  EXPECT_EQ(put.body["data"]["tenant_id"], "tenant-a") << put.body.dump();
  EXPECT_EQ(put.body["data"]["requested_quota_bytes"], kMiB) << put.body.dump();
  EXPECT_EQ(put.body["data"]["has_explicit_policy"], true) << put.body.dump();

  // Exactly one key, exactly granary/<cluster_id>/tenant_quota_policy, holding the policy YAML.
  keys = etcd_->CountPrefix("granary/");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, 1);
  auto raw = etcd_->Get(policy_key_);
  ASSERT_TRUE(raw.ok()) << raw.status();
  ASSERT_TRUE(raw->has_value()) << policy_key_ << " is not in etcd";
  EXPECT_NE((*raw)->find("tenant-a"), std::string::npos) << **raw;
  std::optional<tenant::Policy> stored = StoredPolicy();
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(*stored, (tenant::Policy{{{"tenant-a", kMiB, std::nullopt}}})) << **raw;

  auto quotas = ListQuotas(port);
  ASSERT_TRUE(quotas.has_value());
  EXPECT_EQ(*quotas, (std::map<std::string, uint64_t>{{"tenant-a", kMiB}}));
}

TEST_F(EtcdMasterTest, ChangesWrittenByAnotherMasterArePickedUp) {
  Cluster* m1 = StartMaster();
  ASSERT_NE(m1, nullptr);
  Cluster* m2 = StartMaster();
  ASSERT_NE(m2, nullptr);
  const uint16_t p1 = m1->master_http_port(), p2 = m2->master_http_port();
  ASSERT_NE(p1, p2);
  EXPECT_EQ(RequestedQuota(p2, "tenant-a"), 0u);

  Reply put = PutQuota(p1, "tenant-a", kMiB);
  ASSERT_EQ(put.status, 200) << put.body.dump();
  int64_t ms = WaitMs([&] { return RequestedQuota(p2, "tenant-a") == kMiB; });
  std::cerr << "[ measured ] master 1 PUT to master 2 GET showing tenant-a: " << ms << " ms\n";
  ASSERT_GE(ms, 0) << "master 2 never saw tenant-a";
  EXPECT_LT(ms, 5000) << "master 2 polls every second";

  // And the other way round, a change to an existing tenant.
  put = PutQuota(p2, "tenant-a", 2 * kMiB);
  ASSERT_EQ(put.status, 200) << put.body.dump();
  ms = WaitMs([&] { return RequestedQuota(p1, "tenant-a") == 2 * kMiB; });
  std::cerr << "[ measured ] master 2 PUT to master 1 GET showing the new quota: " << ms << " ms\n";
  ASSERT_GE(ms, 0) << "master 1 never saw the new quota";
  EXPECT_LT(ms, 5000);

  // A DELETE on master 1 reaches master 2 as well.
  Reply del = Request(p1, "DELETE", "/api/v1/tenant_quotas?tenant_id=tenant-a");
  ASSERT_EQ(del.status, 200) << del.body.dump();
  ms = WaitMs([&] {
    auto q = ListQuotas(p2);
    return q.has_value() && q->empty();
  });
  ASSERT_GE(ms, 0) << "master 2 still lists tenant-a after it was deleted on master 1";
  EXPECT_TRUE(StoreOk(Health(p1)));
  EXPECT_TRUE(StoreOk(Health(p2)));
}

TEST_F(EtcdMasterTest, UnreachableEtcdKeepsTheLastGoodPolicyAndSaysSo) {
  Cluster* m = StartMaster(/*nodes=*/1);
  ASSERT_NE(m, nullptr);
  const uint16_t port = m->master_http_port();
  ASSERT_EQ(PutQuota(port, "tenant-a", kMiB).status, 200);
  Client* a = NewClient(m, "tenant-a");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Put("before", MakeValue("before", 1, 4096)).ok());
  auto up = m->Metric("granary_tenant_policy_store_up");
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(*up, 1);

  etcd_->Kill();
  int64_t ms = WaitMs([&] { return StoreDown(Health(port)); });
  std::cerr << "[ measured ] etcd kill -9 to /health policy_store_ok false: " << ms << " ms\n";
  ASSERT_GE(ms, 0) << "health never reported the store down: " << Health(port).dump();
  EXPECT_LT(ms, 5000);

  EXPECT_TRUE(m->master()->Running());
  json health = Health(port);
  EXPECT_EQ(health["status"], "degraded") << health.dump();
  ASSERT_TRUE(health["policy_store_error"].is_string()) << health.dump();
  EXPECT_NE(health["policy_store_error"].get<std::string>().find(etcd_->Endpoint()),
            std::string::npos)
      << health.dump();
  up = m->Metric("granary_tenant_policy_store_up");
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(*up, 0);

  // The last good policy is still in force.
  auto quotas = ListQuotas(port);
  ASSERT_TRUE(quotas.has_value());
  EXPECT_EQ(*quotas, (std::map<std::string, uint64_t>{{"tenant-a", kMiB}}));
  absl::Status st = a->Put("during", MakeValue("during", 1, 4096));
  EXPECT_TRUE(st.ok()) << st;
  Client* a2 = NewClient(m, "tenant-a");  // a session opened while etcd is down
  ASSERT_NE(a2, nullptr);
  st = a2->Put("during-2", MakeValue("during-2", 1, 4096));
  EXPECT_TRUE(st.ok()) << st;
  auto got = a2->Get("before");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == MakeValue("before", 1, 4096));
  Client* z = NewClient(m, "tenant-z");
  ASSERT_NE(z, nullptr);
  st = z->Put("k", "v");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("TENANT_NOT_REGISTERED"), absl::string_view::npos) << st;

  // Admin writes cannot be saved, so they change nothing.
  Reply put = PutQuota(port, "tenant-b", kMiB);
  EXPECT_EQ(put.status, 503) << put.body.dump();
  EXPECT_EQ(put.body["success"], false) << put.body.dump();
  put = PutQuota(port, "tenant-a", 2 * kMiB);
  EXPECT_EQ(put.status, 503) << put.body.dump();
  Reply del = Request(port, "DELETE", "/api/v1/tenant_quotas?tenant_id=tenant-a");
  EXPECT_NE(del.status, 200) << del.body.dump();  // 409 (tenant-a owns objects) or 503
  EXPECT_EQ(Request(port, "GET", "/api/v1/tenant_quotas?tenant_id=tenant-b").status, 404);
  quotas = ListQuotas(port);
  ASSERT_TRUE(quotas.has_value());
  EXPECT_EQ(*quotas, (std::map<std::string, uint64_t>{{"tenant-a", kMiB}}));
  EXPECT_EQ(z->Put("k2", "v").code(), absl::StatusCode::kResourceExhausted);

  // etcd comes back on the same ports and data dir: health recovers, the policy is unchanged.
  st = etcd_->Start();
  ASSERT_TRUE(st.ok()) << st << "\n" << etcd_->Log();
  ms = WaitMs([&] { return StoreOk(Health(port)); });
  std::cerr << "[ measured ] etcd restart to /health policy_store_ok true: " << ms << " ms\n";
  ASSERT_GE(ms, 0) << "health never recovered: " << Health(port).dump();
  health = Health(port);
  EXPECT_EQ(health["status"], "ok") << health.dump();
  EXPECT_FALSE(health.contains("policy_store_error")) << health.dump();
  up = m->Metric("granary_tenant_policy_store_up");
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(*up, 1);
  std::optional<tenant::Policy> stored = StoredPolicy();
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(*stored, (tenant::Policy{{{"tenant-a", kMiB, std::nullopt}}}));
  quotas = ListQuotas(port);
  ASSERT_TRUE(quotas.has_value());
  EXPECT_EQ(*quotas, (std::map<std::string, uint64_t>{{"tenant-a", kMiB}}));
  // And admin writes work again.
  put = PutQuota(port, "tenant-b", kMiB);
  EXPECT_EQ(put.status, 200) << put.body.dump();
  stored = StoredPolicy();
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(*stored,
            (tenant::Policy{{{"tenant-a", kMiB, std::nullopt}, {"tenant-b", kMiB, std::nullopt}}}));
}

// A hung etcd (SIGSTOP: it accepts connections and never answers) stalls an admin write for
// its timeouts, but /health answers meanwhile: the policy lock is not held across etcd I/O.
TEST_F(EtcdMasterTest, HungEtcdDoesNotBlockHealth) {
  Cluster* m = StartMaster();
  ASSERT_NE(m, nullptr);
  const uint16_t port = m->master_http_port();
  ASSERT_EQ(PutQuota(port, "tenant-a", 64 * kMiB).status, 200);
  etcd_->Signal(SIGSTOP);
  Reply put;
  std::thread writer([&] { put = PutQuota(port, "tenant-a", 32 * kMiB); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int64_t worst_ms = 0;
  // The store's timeout is 2 s: etcd stays stopped past it, so the write fails.
  for (int i = 0; i < 10; ++i) {
    const auto t0 = Clock::now();
    json health = Health(port);
    worst_ms = std::max<int64_t>(
        worst_ms, std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
    EXPECT_TRUE(health.is_object()) << "no /health answer while the write waits for etcd";
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  etcd_->Signal(SIGCONT);
  writer.join();
  EXPECT_LT(worst_ms, 500) << "/health waited for etcd";
  EXPECT_EQ(put.status, 503) << put.body.dump();
  EXPECT_EQ(RequestedQuota(port, "tenant-a"), 64 * kMiB) << "a failed save changes nothing";
}

TEST_F(EtcdMasterTest, InvalidDocumentWrittenBySomeoneElseKeepsTheRunningPolicy) {
  Cluster* m = StartMaster();
  ASSERT_NE(m, nullptr);
  const uint16_t port = m->master_http_port();
  ASSERT_EQ(PutQuota(port, "tenant-a", kMiB).status, 200);
  const std::map<std::string, uint64_t> running = {{"tenant-a", kMiB}};

  // A YAML syntax error.
  ASSERT_TRUE(etcd_->Put(policy_key_, "version: 1\ntenants: [\n  - name: tenant-x\n").ok());
  int64_t ms = WaitMs([&] { return StoreDown(Health(port)); });
  ASSERT_GE(ms, 0) << "health never reported the bad document: " << Health(port).dump();
  std::cerr << "[ measured ] bad YAML in etcd to /health policy_store_ok false: " << ms << " ms\n";
  json health = Health(port);
  EXPECT_EQ(health["status"], "degraded") << health.dump();
  ASSERT_TRUE(health["policy_store_error"].is_string()) << health.dump();
  EXPECT_NE(health["policy_store_error"].get<std::string>().find(policy_key_), std::string::npos)
      << health.dump();
  EXPECT_TRUE(m->master()->Running());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // more polls: still kept
  auto quotas = ListQuotas(port);
  ASSERT_TRUE(quotas.has_value());
  EXPECT_EQ(*quotas, running);

  // Well-formed YAML that breaks the schema (a reserved name): the same.
  ASSERT_TRUE(
      etcd_->Put(policy_key_, "version: 1\ntenants:\n  - name: _probe\n    quota: 1GB\n").ok());
  ms = WaitMs([&] {
    json h = Health(port);
    return StoreDown(h) && h["policy_store_error"].is_string() &&
           h["policy_store_error"].get<std::string>().find("_probe") != std::string::npos;
  });
  ASSERT_GE(ms, 0) << "health never named the reserved tenant: " << Health(port).dump();
  quotas = ListQuotas(port);
  ASSERT_TRUE(quotas.has_value());
  EXPECT_EQ(*quotas, running);
  EXPECT_TRUE(m->master()->Running());

  // A valid document written by someone else is applied and the error clears.
  ASSERT_TRUE(etcd_
                  ->Put(policy_key_,
                        "version: 1\ntenants:\n  - name: tenant-a\n    quota: 2MB\n"
                        "  - name: tenant-c\n    quota: 3MB\n")
                  .ok());
  ms =
      WaitMs([&] { return StoreOk(Health(port)) && RequestedQuota(port, "tenant-c") == 3 * kMiB; });
  ASSERT_GE(ms, 0) << Health(port).dump();
  quotas = ListQuotas(port);
  ASSERT_TRUE(quotas.has_value());
  EXPECT_EQ(*quotas,
            (std::map<std::string, uint64_t>{{"tenant-a", 2 * kMiB}, {"tenant-c", 3 * kMiB}}));
}

// Admin writes on two masters within one poll interval: each is made to the stored policy, not
// to the writer's copy of it from up to a second ago, so neither is lost.
TEST_F(EtcdMasterTest, AdminWritesOnTwoMastersWithinOnePollAreBothKept) {
  Cluster* m1 = StartMaster();
  ASSERT_NE(m1, nullptr);
  Cluster* m2 = StartMaster();
  ASSERT_NE(m2, nullptr);
  const uint16_t p1 = m1->master_http_port(), p2 = m2->master_http_port();
  std::map<std::string, uint64_t> expected;
  for (int round = 0; round < 3; ++round) {
    const std::string on1 = absl::StrCat("one-", round), on2 = absl::StrCat("two-", round);
    Reply put = PutQuota(p1, on1, kMiB + round);
    ASSERT_EQ(put.status, 200) << put.body.dump();
    put = PutQuota(p2, on2, 2 * kMiB + round);  // right away: master 2 has not polled yet
    ASSERT_EQ(put.status, 200) << put.body.dump();
    expected[on1] = kMiB + round;
    expected[on2] = 2 * kMiB + round;
    std::optional<tenant::Policy> stored = StoredPolicy();
    ASSERT_TRUE(stored.has_value());
    for (const auto& [id, bytes] : expected) {
      const tenant::TenantPolicy* t = stored->Find(id);
      EXPECT_TRUE(t != nullptr && t->quota_bytes == bytes)
          << id << " lost from etcd after round " << round;
    }
  }
  // Both masters converge on the stored policy.
  for (uint16_t port : {p1, p2}) {
    int64_t ms = WaitMs([&] { return ListQuotas(port) == expected; });
    EXPECT_GE(ms, 0) << "master on port " << port << " lists "
                     << Request(port, "GET", "/api/v1/tenant_quotas").body.dump();
  }
}

// Admin writes on one master while its poller re-reads etcd: a poll that read the key before a
// write was saved must not put the older policy back (and a later write must not then save a
// policy that lacks the earlier one).
TEST_F(EtcdMasterTest, PollingNeverRevertsThisMastersOwnWrites) {
  Cluster* m = StartMaster();
  ASSERT_NE(m, nullptr);
  const uint16_t port = m->master_http_port();
  std::map<std::string, uint64_t> expected;
  const auto t0 = Clock::now();
  int n = 0;
  for (; Clock::now() - t0 < std::chrono::seconds(4); ++n) {  // spans several 1 s polls
    const std::string id = absl::StrCat("t-", 1000 + n);
    Reply put = PutQuota(port, id, kMiB + n);
    ASSERT_EQ(put.status, 200) << id << ": " << put.body.dump();
    expected[id] = kMiB + n;
    // Read-your-writes on the same master.
    ASSERT_EQ(RequestedQuota(port, id), kMiB + n) << id << " vanished right after its PUT";
  }
  std::cerr << "[ measured ] " << n << " admin PUTs in 4 s\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // one more poll
  auto quotas = ListQuotas(port);
  ASSERT_TRUE(quotas.has_value());
  EXPECT_EQ(*quotas, expected);
  std::optional<tenant::Policy> stored = StoredPolicy();
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->tenants.size(), expected.size());
  for (const auto& [id, bytes] : expected) {
    const tenant::TenantPolicy* t = stored->Find(id);
    EXPECT_TRUE(t != nullptr && t->quota_bytes == bytes) << id << " lost from etcd";
  }
}

}  // namespace
}  // namespace granary::testing
