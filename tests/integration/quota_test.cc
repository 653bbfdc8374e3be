// Multi-tenant quota end to end: a real master with a policy file, a real node, clients of two
// tenants, writers killed mid-put, SIGHUP reloads and the admin API over HTTP.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "granary/error_reason.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

using nlohmann::json;
constexpr uint64_t kMiB = 1 << 20;
// What one replica of a 1 MiB value is charged: the 64-byte header, aligned.
constexpr uint64_t kCharge = kMiB + 64;

class QuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/granary_quota_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    policy_path_ = std::string(tmpl) + "/tenant_quotas.yaml";
    WritePolicy(
        "version: 1\ntenants:\n  - name: tenant-a\n    quota: 4MB\n"
        "  - name: tenant-b\n    quota: 4MB\n");
    Cluster::Options o;
    o.node_segment_size = "64MB";
    o.client_ttl_sec = 2;
    o.lease_ttl_ms = 60'000;
    o.master_flags = {"--enable_multi_tenants", "--tenant_quota_connector_type=file",
                      "--tenant_quota_connector_uri=" + policy_path_};
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
  }
  void WritePolicy(const std::string& yaml) { std::ofstream(policy_path_) << yaml; }
  json Tenant(const std::string& id) {
    auto body = HttpGet(cluster_->master_http_port(), "/api/v1/tenant_quotas?tenant_id=" + id);
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? json::parse(*body)["data"] : json();
  }
  std::unique_ptr<client::ClientImpl> NewClient(const std::string& tenant) {
    auto c = client::ClientImpl::Create(cluster_->ClientOpts(tenant));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::string policy_path_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(QuotaTest, FullTenantEvictsItsOwnOldestAndLeavesTheOtherTenantAlone) {
  auto a = NewClient("tenant-a");
  auto b = NewClient("tenant-b");
  ASSERT_TRUE(a && b);
  for (int i = 0; i < 3; ++i) {
    std::string k = absl::StrCat("b-", i);
    ASSERT_TRUE(b->Put(k, MakeValue(k, 1, kMiB)).ok()) << k;
  }
  // Ten 1 MiB writes into a 4 MB quota: each one past the third evicts A's own oldest.
  for (int i = 0; i < 10; ++i) {
    std::string k = absl::StrCat("a-", i);
    absl::Status st = a->Put(k, MakeValue(k, 1, kMiB));
    ASSERT_TRUE(st.ok()) << k << ": " << st;
    json t = Tenant("tenant-a");
    ASSERT_LE(t["charged_bytes"].get<uint64_t>(), t["effective_quota_bytes"].get<uint64_t>());
  }
  EXPECT_EQ(a->Get("a-0").status().code(), absl::StatusCode::kNotFound);
  auto last = a->Get("a-9");
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_TRUE(*last == MakeValue("a-9", 1, kMiB));
  json ta = Tenant("tenant-a");
  EXPECT_EQ(ta["charged_bytes"].get<uint64_t>(), 3 * kCharge);
  EXPECT_EQ(ta["entries"].get<uint64_t>(), 3u);
  // B is untouched.
  for (int i = 0; i < 3; ++i) {
    std::string k = absl::StrCat("b-", i);
    auto v = b->Get(k);
    ASSERT_TRUE(v.ok()) << k << ": " << v.status();
    EXPECT_TRUE(*v == MakeValue(k, 1, kMiB));
  }
  EXPECT_EQ(Tenant("tenant-b")["charged_bytes"].get<uint64_t>(), 3 * kCharge);
  auto evicted =
      cluster_->Metric("granary_tenant_evictions_total{tenant_id=\"tenant-a\",reason=\"quota\"}");
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_EQ(*evicted, 7);

  // With every one of A's objects leased, nothing can be evicted: the write is refused.
  for (int i = 7; i < 10; ++i) {
    auto lease = a->Call<proto::GetRequest, proto::GetReply>(
        proto::MsgType::kGet, proto::GetRequest{{absl::StrCat("a-", i)}});
    ASSERT_TRUE(lease.ok() && lease->results[0].status.ToStatus().ok());
  }
  absl::Status st = a->Put("a-over", MakeValue("a-over", 1, kMiB));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_EQ(ErrorReasonOf(st), ErrorReason::kQuotaExceeded) << st;  // master -> wire -> client
  auto rejects = cluster_->Metric(
      "granary_tenant_quota_reject_total{tenant_id=\"tenant-a\",reason=\"quota_exceeded\"}");
  ASSERT_TRUE(rejects.ok());
  EXPECT_GE(*rejects, 1);
}

TEST_F(QuotaTest, UnregisteredTenantIsRefusedNamingIt) {
  auto c = NewClient("tenant-z");
  ASSERT_NE(c, nullptr);
  absl::Status st = c->Put("k", "v");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorReasonOf(st), ErrorReason::kTenantNotRegistered) << st;
  EXPECT_NE(st.message().find("tenant-z"), absl::string_view::npos) << st;
  auto d = NewClient("default");
  EXPECT_EQ(d->Put("k", "v").code(), absl::StatusCode::kResourceExhausted);  // not special
}

TEST_F(QuotaTest, KilledWriterChargeReturnsToCommittedWithinTwoClientTtl) {
  auto a = NewClient("tenant-a");
  ASSERT_TRUE(a->Put("kept", MakeValue("kept", 1, kMiB)).ok());
  ASSERT_EQ(Tenant("tenant-a")["charged_bytes"].get<uint64_t>(), kCharge);
  auto writer = Process::Start({BinDir() + "/put_start_hang", cluster_->master_address(),
                                "tenant-a", "doomed", std::to_string(2 * kMiB)},
                               {}, cluster_->dir() + "/writer.log");
  ASSERT_TRUE(writer.ok());
  bool started = false;
  for (int i = 0; i < 200 && !started; ++i) {
    started = (*writer)->Log().find("STARTED") != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_TRUE(started) << (*writer)->Log();
  json t = Tenant("tenant-a");
  EXPECT_EQ(t["inflight_bytes"].get<uint64_t>(), 2 * kMiB + 64);
  EXPECT_EQ(t["charged_bytes"].get<uint64_t>(), kCharge + 2 * kMiB + 64);
  auto t0 = std::chrono::steady_clock::now();
  (*writer)->Kill(SIGKILL);
  (*writer)->Wait();
  int64_t ms = -1;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(4)) {
    if (Tenant("tenant-a")["charged_bytes"].get<uint64_t>() == kCharge) {
      ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 t0)
               .count();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(ms, 0) << "charge not refunded within 2 x client_ttl";
  EXPECT_EQ(Tenant("tenant-a")["inflight_bytes"].get<uint64_t>(), 0u);
  std::cerr << "[ measured ] tenant-a writer kill -9 to charge refunded: " << ms << " ms\n";
}

TEST_F(QuotaTest, SighupReloadsThePolicyAndKeepsItWhenTheNewFileIsInvalid) {
  EXPECT_EQ(Tenant("tenant-b")["requested_quota_bytes"].get<uint64_t>(), 4 * kMiB);
  WritePolicy(
      "version: 1\ntenants:\n  - name: tenant-a\n    quota: 4MB\n"
      "  - name: tenant-b\n    quota: 8MB\n");
  cluster_->master()->Kill(SIGHUP);
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    seen = Tenant("tenant-b")["requested_quota_bytes"].get<uint64_t>() == 8 * kMiB;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(seen);
  WritePolicy("version: 2\ntenants: []\n");
  cluster_->master()->Kill(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(cluster_->master()->Running());
  EXPECT_EQ(Tenant("tenant-b")["requested_quota_bytes"].get<uint64_t>(), 8 * kMiB);
  EXPECT_NE(cluster_->master()->Log().find("version"), std::string::npos);
}

TEST_F(QuotaTest, MaxEntriesEvictsTheOldestEntriesAndNeverRejects) {
  httplib::Client http("127.0.0.1", cluster_->master_http_port());
  auto res =
      http.Put("/api/v1/tenant_quotas?tenant_id=tenant-e",
               R"({"requested_quota_bytes": 8388608, "max_entries": 4})", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["data"]["max_entries"].get<uint64_t>(), 4u);
  auto e = NewClient("tenant-e");
  for (int i = 0; i < 10; ++i) {
    std::string k = absl::StrCat("e-", i);
    ASSERT_TRUE(e->Put(k, MakeValue(k, 1, 4096)).ok()) << k;  // never refused
  }
  json t = Tenant("tenant-e");
  EXPECT_EQ(t["entries"].get<uint64_t>(), 4u);
  for (int i = 0; i < 6; ++i) EXPECT_FALSE(*e->Exist(absl::StrCat("e-", i))) << i;
  for (int i = 6; i < 10; ++i) {
    auto v = e->Get(absl::StrCat("e-", i));  // reads are never refused for it
    ASSERT_TRUE(v.ok()) << v.status();
  }
  auto ev = cluster_->Metric(
      "granary_tenant_evictions_total{tenant_id=\"tenant-e\",reason=\"max_entries\"}");
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_EQ(*ev, 6);
}

TEST_F(QuotaTest, AdminApiCreatesATenantThatCanThenWrite) {
  httplib::Client http("127.0.0.1", cluster_->master_http_port());
  auto res = http.Put("/api/v1/tenant_quotas?tenant_id=tenant-c",
                      R"({"requested_quota_bytes": 2097152})", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  auto c = NewClient("tenant-c");
  ASSERT_TRUE(c->Put("k", MakeValue("k", 1, 4096)).ok());
  // Saved to the policy file first.
  std::ifstream in(policy_path_);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("tenant-c"), std::string::npos) << text;
  auto del = http.Delete("/api/v1/tenant_quotas?tenant_id=tenant-c");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 409) << del->body;
  EXPECT_NE(del->body.find("TENANT_NOT_EMPTY"), std::string::npos);
  ASSERT_TRUE(c->Remove("k").ok());
  del = http.Delete("/api/v1/tenant_quotas?tenant_id=tenant-c");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200) << del->body;
}

}  // namespace
}  // namespace granary::testing

namespace granary::testing {
namespace {

// --admin_token_file: mutating admin calls need the bearer token; reads do not.
TEST(AdminTokenTest, MutatingCallsNeedTheBearerToken) {
  char tmpl[] = "/tmp/granary_token_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/q.yaml") << "version: 1\ntenants: []\n";
  std::ofstream(dir + "/token") << "t0ken-abc\n";
  Cluster::Options o;
  o.master_flags = {"--enable_multi_tenants", "--tenant_quota_connector_uri=" + dir + "/q.yaml",
                    "--admin_token_file=" + dir + "/token"};
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  httplib::Client http("127.0.0.1", (*c)->master_http_port());
  const char* path = "/api/v1/tenant_quotas?tenant_id=tenant-t";
  const char* body = R"({"requested_quota_bytes": 1048576})";
  auto res = http.Put(path, body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401) << res->body;
  EXPECT_NE(res->body.find("UNAUTHENTICATED"), std::string::npos);
  res = http.Put(path, {{"Authorization", "Bearer wrong"}}, body, "application/json");
  EXPECT_EQ(res->status, 401);
  res = http.Delete(path);
  EXPECT_EQ(res->status, 401);
  res = http.Put(path, {{"Authorization", "Bearer t0ken-abc"}}, body, "application/json");
  EXPECT_EQ(res->status, 200) << res->body;
  res = http.Get(path);  // reads stay open
  EXPECT_EQ(res->status, 200) << res->body;
}

// In strict mode the master refuses to start without a loadable, valid policy.
TEST(QuotaStartupTest, MasterRefusesToStartWithAMissingOrInvalidPolicy) {
  char tmpl[] = "/tmp/granary_quota_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto run = [&](const std::string& uri) {
    auto p = Process::Start({BinDir() + "/granary_master", "--rpc_port=0", "--metrics_port=0",
                             "--enable_multi_tenants", "--tenant_quota_connector_uri=" + uri},
                            {}, dir + "/master.log");
    EXPECT_TRUE(p.ok());
    int rc = (*p)->Wait();
    return std::make_pair(rc, (*p)->Log());
  };
  auto [rc, log] = run(dir + "/missing.yaml");
  EXPECT_NE(rc, 0);
  EXPECT_NE(log.find(dir + "/missing.yaml"), std::string::npos) << log;
  std::ofstream(dir + "/bad.yaml") << "version: 1\ntenants:\n  - name: _probe\n    quota: 1GB\n";
  std::tie(rc, log) = run(dir + "/bad.yaml");
  EXPECT_NE(rc, 0);
  EXPECT_NE(log.find("_probe"), std::string::npos) << log;
}

}  // namespace
}  // namespace granary::testing
