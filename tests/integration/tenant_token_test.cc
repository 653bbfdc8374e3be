// Tenant client credentials end to end (docs/security.md): a real master given a tokens file
// (and, in strict mode, a policy with token_sha256), a real node, in-process clients and the
// granary CLI. A client with the right token works; a wrong or missing token fails at connect
// with an UNAUTHENTICATED error naming the tenant; tenants without a hash are open unless
// --require_tenant_tokens; a policy reload rotates a token; a bad tokens file stops the master.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

using nlohmann::json;

bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class TenantTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/granary_token_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    tokens_path_ = dir_ + "/tenant_tokens";
    policy_path_ = dir_ + "/tenant_quotas.yaml";
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    cluster_.reset();
    ASSERT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
  }
  void StartCluster(std::vector<std::string> master_flags) {
    Cluster::Options o;
    o.master_flags = std::move(master_flags);
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& tenant,
                                                  const std::string& token) {
    ClientOptions o = cluster_->ClientOpts(tenant);
    o.tenant_token = token;
    return Client::Create(o);
  }
  // Puts and reads back one value; the client must work.
  void ExpectRoundTrip(Client* c, const std::string& key) {
    std::string value = MakeValue(key, 1, 4096);
    ASSERT_TRUE(c->Put(key, value).ok());
    auto got = c->Get(key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == value);
  }
  // Runs the granary CLI; returns its exit status, its output in cli_out_.
  int Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/granary",
                                     "--master=" + cluster_->master_address()};
    for (auto& a : args) argv.push_back(a);
    auto p = Process::Start(argv, {}, absl::StrCat(dir_, "/cli", cli_seq_++, ".log"));
    EXPECT_TRUE(p.ok());
    int rc = (*p)->Wait();
    cli_out_ = (*p)->Log();
    return rc;
  }

  std::string dir_, tokens_path_, policy_path_;
  std::unique_ptr<Cluster> cluster_;
  std::string cli_out_;
  int cli_seq_ = 0;
};

TEST_F(TenantTokenTest, TokensFileGuardsItsTenantsAndLeavesOthersOpen) {
  std::ofstream(tokens_path_) << "# tenant tokens\n\ntenant-secure "
                              << common::Sha256Hex("right-token") << "\n";
  StartCluster({"--tenant_tokens_file=" + tokens_path_});

  // The right token: the client works.
  auto good = Connect("tenant-secure", "right-token");
  ASSERT_TRUE(good.ok()) << good.status();
  ExpectRoundTrip(good->get(), "secure/0");

  // A wrong token: refused at connect, naming the tenant, never the token.
  auto wrong = Connect("tenant-secure", "wrong-token");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated) << wrong.status();
  EXPECT_TRUE(Has(std::string(wrong.status().message()),
                  "the token for tenant 'tenant-secure' does not match"))
      << wrong.status();
  EXPECT_FALSE(Has(std::string(wrong.status().message()), "wrong-token")) << wrong.status();

  // No token at all.
  auto missing = Connect("tenant-secure", "");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnauthenticated) << missing.status();
  EXPECT_TRUE(
      Has(std::string(missing.status().message()), "tenant 'tenant-secure' requires a token"))
      << missing.status();

  // A tenant without a hash needs no token (--require_tenant_tokens is off).
  auto open = Connect("tenant-open", "");
  ASSERT_TRUE(open.ok()) << open.status();
  ExpectRoundTrip(open->get(), "open/0");

  // The refused hellos are counted; the master logged them without the token.
  auto rejects = cluster_->Metric("granary_master_hello_rejects_total{reason=\"token\"}");
  ASSERT_TRUE(rejects.ok()) << rejects.status();
  EXPECT_EQ(*rejects, 2);
  EXPECT_TRUE(Has(cluster_->master()->Log(), "does not match"));
  EXPECT_FALSE(Has(cluster_->master()->Log(), "wrong-token"));
  EXPECT_FALSE(Has(cluster_->master()->Log(), "right-token"));
  // Nothing the master serves shows the hash.
  auto metrics = HttpGet(cluster_->master_http_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_FALSE(Has(*metrics, common::Sha256Hex("right-token")));

  // The stored object is intact and the first client still works.
  auto again = (*good)->Get("secure/0");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again == MakeValue("secure/0", 1, 4096));
  EXPECT_TRUE(cluster_->master()->Running());
}

TEST_F(TenantTokenTest, CliReadsTheTokenFromAFileOrTheEnvironment) {
  std::ofstream(tokens_path_) << "tenant-secure " << common::Sha256Hex("right-token") << "\n";
  StartCluster({"--tenant_tokens_file=" + tokens_path_});
  const std::string token_file = dir_ + "/token", value_file = dir_ + "/value";
  std::ofstream(token_file) << "right-token\n";  // the final newline is not part of it
  std::ofstream(value_file) << "hello from the cli";
  ASSERT_EQ(Cli({"--tenant_id=tenant-secure", "--tenant_token_file=" + token_file, "put", "k",
                 value_file}),
            0)
      << cli_out_;
  std::ofstream(token_file, std::ios::trunc) << "wrong-token\n";
  EXPECT_EQ(Cli({"--tenant_id=tenant-secure", "--tenant_token_file=" + token_file, "get", "k"}), 1)
      << cli_out_;
  EXPECT_TRUE(Has(cli_out_, "does not match")) << cli_out_;
  EXPECT_FALSE(Has(cli_out_, "wrong-token")) << cli_out_;
  EXPECT_EQ(Cli({"--tenant_id=tenant-secure", "get", "k"}), 1) << cli_out_;
  EXPECT_TRUE(Has(cli_out_, "requires a token")) << cli_out_;
  // GRANARY_TENANT_TOKEN, when no config file is named.
  auto p = Process::Start({BinDir() + "/granary", "--master=" + cluster_->master_address(),
                           "--tenant_id=tenant-secure", "get", "k"},
                          {"GRANARY_TENANT_TOKEN=right-token"}, dir_ + "/cli_env.log");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->Wait(), 0) << (*p)->Log();
  EXPECT_TRUE(Has((*p)->Log(), "hello from the cli")) << (*p)->Log();
}

// Strict mode with the hash in the quota policy: tenants without a hash are refused, and a
// SIGHUP reload rotates a tenant's token for the next connection.
TEST_F(TenantTokenTest, RequiredTokensFollowPolicyReloads) {
  auto write_policy = [&](const std::string& token) {
    std::ofstream(policy_path_ + ".new")
        << "version: 1\ntenants:\n  - name: tenant-p\n    quota: 16MB\n    token_sha256: "
        << common::Sha256Hex(token) << "\n  - name: tenant-nohash\n    quota: 16MB\n";
    ASSERT_EQ(::rename((policy_path_ + ".new").c_str(), policy_path_.c_str()), 0);
  };
  write_policy("token-1");
  std::ofstream(tokens_path_) << "tenant-f " << common::Sha256Hex("token-f") << "\n";
  StartCluster({"--enable_multi_tenants", "--tenant_quota_connector_uri=" + policy_path_,
                "--tenant_tokens_file=" + tokens_path_, "--require_tenant_tokens"});

  auto p1 = Connect("tenant-p", "token-1");
  ASSERT_TRUE(p1.ok()) << p1.status();
  ExpectRoundTrip(p1->get(), "p/0");
  // tenant-f's hash is in the tokens file only; with no policy entry it cannot write under
  // strict quota, but it may connect.
  auto f = Connect("tenant-f", "token-f");
  ASSERT_TRUE(f.ok()) << f.status();

  auto nohash = Connect("tenant-nohash", "whatever");
  ASSERT_FALSE(nohash.ok());
  EXPECT_EQ(nohash.status().code(), absl::StatusCode::kUnauthenticated) << nohash.status();
  EXPECT_TRUE(
      Has(std::string(nohash.status().message()), "tenant 'tenant-nohash' requires a token"))
      << nohash.status();

  // Rotate tenant-p's token.
  write_policy("token-2");
  cluster_->master()->Kill(SIGHUP);
  bool rotated = false;
  for (int i = 0; i < 100 && !rotated; ++i) {
    rotated = Connect("tenant-p", "token-2").ok();
    if (!rotated) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(rotated);
  auto old = Connect("tenant-p", "token-1");
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kUnauthenticated) << old.status();
  // A reload that brings a bad token_sha256 is refused; the running policy (token-2) stays.
  std::ofstream(policy_path_ + ".new")
      << "version: 1\ntenants:\n  - name: tenant-p\n    quota: 16MB\n    token_sha256: abc\n";
  ASSERT_EQ(::rename((policy_path_ + ".new").c_str(), policy_path_.c_str()), 0);
  cluster_->master()->Kill(SIGHUP);
  bool logged = false;
  for (int i = 0; i < 100 && !logged; ++i) {
    logged = Has(cluster_->master()->Log(), "'abc' is not a SHA-256");
    if (!logged) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(logged) << cluster_->master()->Log();
  EXPECT_TRUE(cluster_->master()->Running());
  EXPECT_TRUE(Connect("tenant-p", "token-2").ok());
  // A session opened with the old token stays (the check is at hello).
  auto still = (*p1)->Get("p/0");
  ASSERT_TRUE(still.ok()) << still.status();

  // The admin API shows has_token, never the hash.
  auto body = HttpGet(cluster_->master_http_port(), "/api/v1/tenant_quotas");
  ASSERT_TRUE(body.ok()) << body.status();
  json list = json::parse(*body);
  for (const json& t : list["data"]) {
    EXPECT_EQ(t["has_token"], t["tenant_id"] != "tenant-nohash") << t;
  }
  EXPECT_FALSE(Has(*body, common::Sha256Hex("token-2"))) << *body;
  EXPECT_TRUE(cluster_->master()->Running());
}

// A bad tokens file stops the master at start, naming the file, the line and the value.
TEST(TenantTokenStartupTest, MasterRefusesToStartWithABadTokensFile) {
  char tmpl[] = "/tmp/granary_token_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto run = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {BinDir() + "/granary_master", "--rpc_port=0",
                                     "--metrics_port=0", "--metrics_host=127.0.0.1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto p = Process::Start(argv, {}, dir + "/master.log");
    EXPECT_TRUE(p.ok());
    int rc = (*p)->Wait();
    std::string log = (*p)->Log();
    std::remove((dir + "/master.log").c_str());
    return std::make_pair(rc, log);
  };
  const std::string path = dir + "/tokens";
  std::ofstream(path) << "# ok so far\ntenant-a " << common::Sha256Hex("a")
                      << "\ntenant-b 12345xyz\n";
  auto [rc, log] = run({"--tenant_tokens_file=" + path});
  EXPECT_EQ(rc, 1) << log;
  EXPECT_TRUE(Has(log, path)) << log;
  EXPECT_TRUE(Has(log, "line 3")) << log;
  EXPECT_TRUE(Has(log, "'12345xyz'")) << log;
  EXPECT_TRUE(Has(log, "64 hex digits")) << log;

  std::tie(rc, log) = run({"--tenant_tokens_file=" + dir + "/missing"});
  EXPECT_EQ(rc, 1) << log;
  EXPECT_TRUE(Has(log, dir + "/missing")) << log;

  // Required tokens with nowhere to find a hash: refused, naming the flag.
  std::tie(rc, log) = run({"--require_tenant_tokens"});
  EXPECT_EQ(rc, 1) << log;
  EXPECT_TRUE(Has(log, "--require_tenant_tokens")) << log;

  // Policy token_sha256 of the wrong form: refused, naming the tenant and the value.
  std::ofstream(dir + "/q.yaml") << "version: 1\ntenants:\n  - name: tenant-q\n    quota: 1GB\n"
                                 << "    token_sha256: nothex\n";
  std::tie(rc, log) =
      run({"--enable_multi_tenants", "--tenant_quota_connector_uri=" + dir + "/q.yaml"});
  EXPECT_EQ(rc, 1) << log;
  EXPECT_TRUE(Has(log, "tenant 'tenant-q'")) << log;
  EXPECT_TRUE(Has(log, "token_sha256")) << log;
  EXPECT_TRUE(Has(log, "'nothex'")) << log;
  ASSERT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
}

}  // namespace
}  // namespace granary::testing
