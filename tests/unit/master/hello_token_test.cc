// Client credentials at session hello: MasterService::Hello with the token check installed the
// way the master server installs it (TenantManager::MakeTokenCheck over a real policy file),
// driven in-process with a FakeClock.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/sha256.h"
#include "master/master_options.h"
#include "master/master_service.h"
#include "master/tenant/tenant_manager.h"
#include "master/tenant/tenant_tokens.h"
#include "proto/messages.h"

namespace granary::master {
namespace {

bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::string tmp = path + ".edit";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  ASSERT_EQ(::rename(tmp.c_str(), path.c_str()), 0);
}

class HelloTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "granary_hello_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/tenant_quotas.yaml";
    // tenant-a has a token in the policy; tenant-b has none.
    WritePolicy(common::Sha256Hex("token-a"));
  }
  void TearDown() override {
    svc_.reset();  // its check calls into the manager
    manager_.reset();
    ASSERT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
  }

  void WritePolicy(const std::string& tenant_a_hash) {
    std::string yaml = "version: 1\ntenants:\n  - name: tenant-a\n    quota: 1GB\n";
    if (!tenant_a_hash.empty()) absl::StrAppend(&yaml, "    token_sha256: ", tenant_a_hash, "\n");
    absl::StrAppend(&yaml, "  - name: tenant-b\n    quota: 1GB\n");
    WriteFile(path_, yaml);
  }

  // A service whose check is the server's: the tokens file's hashes over the live policy.
  void Start(tenant::TokenHashes file_hashes = {}, bool require = false) {
    opts_.enable_multi_tenants = true;
    opts_.require_tenant_tokens = require;
    svc_ = std::make_unique<MasterService>(opts_, &clock_, &metrics_);
    MasterService* svc = svc_.get();
    auto m = tenant::TenantManager::CreateWithStore(
        true, tenant::NewFilePolicyStore(path_), svc_->ledger(), [svc] { return svc->capacity(); });
    ASSERT_TRUE(m.ok()) << m.status();
    manager_ = std::move(*m);
    svc_->SetTokenCheck(manager_->MakeTokenCheck(std::move(file_hashes), require));
  }

  proto::WireStatus Hello(const std::string& tenant, const std::string& token,
                          proto::Role role = proto::Role::kClient) {
    proto::HelloRequest h;
    h.role = role;
    h.client_id = absl::StrCat("uuid-", next_sid_);
    h.tenant_id = tenant;
    h.token = token;
    return svc_->Hello(next_sid_++, h).status;
  }

  uint64_t Rejects() {
    return metrics_.Counter("granary_master_hello_rejects_total", "", {{"reason", "token"}})
        ->value();
  }

  static absl::StatusCode Code(const proto::WireStatus& s) { return s.ToStatus().code(); }

  std::string dir_, path_;
  MasterOptions opts_;
  common::FakeClock clock_;
  common::MetricsRegistry metrics_;
  std::unique_ptr<MasterService> svc_;
  std::unique_ptr<tenant::TenantManager> manager_;
  SessionId next_sid_ = 1;
};

TEST_F(HelloTokenTest, RightTokenIsAcceptedAndTheSessionWorks) {
  Start();
  SessionId sid = next_sid_;
  proto::WireStatus st = Hello("tenant-a", "token-a");
  ASSERT_EQ(Code(st), absl::StatusCode::kOk) << st.message;
  EXPECT_EQ(Code(svc_->Heartbeat(sid).status), absl::StatusCode::kOk);
  EXPECT_EQ(Code(svc_->Exist(sid, proto::KeysRequest{{"k"}}).status), absl::StatusCode::kOk);
  EXPECT_EQ(Rejects(), 0u);
}

TEST_F(HelloTokenTest, WrongOrMissingTokenIsUnauthenticatedNamingTheTenantOnly) {
  Start();
  SessionId sid = next_sid_;
  proto::WireStatus wrong = Hello("tenant-a", "token-b");
  EXPECT_EQ(Code(wrong), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.message, "the token for tenant 'tenant-a' does not match");
  EXPECT_FALSE(Has(wrong.message, "token-b"));
  EXPECT_FALSE(Has(wrong.message, common::Sha256Hex("token-a")));
  // No session was opened.
  EXPECT_EQ(Code(svc_->Heartbeat(sid).status), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Code(svc_->Exist(sid, proto::KeysRequest{{"k"}}).status),
            absl::StatusCode::kFailedPrecondition);

  proto::WireStatus missing = Hello("tenant-a", "");
  EXPECT_EQ(Code(missing), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Has(missing.message, "tenant 'tenant-a' requires a token")) << missing.message;
  EXPECT_EQ(Rejects(), 2u);
  // A later hello on a fresh session with the right token still works.
  EXPECT_EQ(Code(Hello("tenant-a", "token-a")), absl::StatusCode::kOk);
  EXPECT_EQ(Rejects(), 2u);
}

TEST_F(HelloTokenTest, TenantWithoutAHashNeedsNoTokenUnlessRequired) {
  Start();
  EXPECT_EQ(Code(Hello("tenant-b", "")), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Hello("tenant-b", "ignored")), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Hello("not-in-policy", "")), absl::StatusCode::kOk);
  EXPECT_EQ(Rejects(), 0u);
}

TEST_F(HelloTokenTest, RequireTenantTokensRefusesTenantsWithoutAHash) {
  Start({{"tenant-f", common::Sha256Hex("token-f")}}, /*require=*/true);
  proto::WireStatus b = Hello("tenant-b", "anything");
  EXPECT_EQ(Code(b), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Has(b.message, "tenant 'tenant-b' requires a token")) << b.message;
  EXPECT_EQ(Code(Hello("not-in-policy", "")), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code(Hello("tenant-a", "token-a")), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Hello("tenant-f", "token-f")), absl::StatusCode::kOk);
  EXPECT_EQ(Rejects(), 2u);
}

TEST_F(HelloTokenTest, RequireFromOptionsAppliesWithoutAnInstalledCheck) {
  opts_.require_tenant_tokens = true;
  common::MetricsRegistry m1, m2;
  MasterService svc(opts_, &clock_, &m1);
  proto::HelloRequest h;
  h.tenant_id = "tenant-a";
  EXPECT_EQ(Code(svc.Hello(1, h).status), absl::StatusCode::kUnauthenticated);
  opts_.require_tenant_tokens = false;
  MasterService open(opts_, &clock_, &m2);
  EXPECT_EQ(Code(open.Hello(1, h).status), absl::StatusCode::kOk);
}

TEST_F(HelloTokenTest, TokensFileOverridesThePolicy) {
  Start({{"tenant-a", common::Sha256Hex("file-token")}});
  EXPECT_EQ(Code(Hello("tenant-a", "token-a")), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code(Hello("tenant-a", "file-token")), absl::StatusCode::kOk);
}

TEST_F(HelloTokenTest, TokensFileGivesATenantWithoutAPolicyHashAToken) {
  Start({{"tenant-b", common::Sha256Hex("b")}});
  EXPECT_EQ(Code(Hello("tenant-b", "")), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code(Hello("tenant-b", "b")), absl::StatusCode::kOk);
  EXPECT_TRUE(svc_->TenantHasToken("tenant-b"));
  EXPECT_TRUE(svc_->TenantHasToken("tenant-a"));
  EXPECT_FALSE(svc_->TenantHasToken("tenant-c"));
}

TEST_F(HelloTokenTest, PolicyReloadChangesTheExpectedToken) {
  Start();
  EXPECT_EQ(Code(Hello("tenant-a", "token-a")), absl::StatusCode::kOk);
  // Rotate: the new hash applies to the next hello, the old token stops working.
  WritePolicy(common::Sha256Hex("token-a2"));
  ASSERT_TRUE(manager_->Reload().ok());
  EXPECT_EQ(Code(Hello("tenant-a", "token-a")), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code(Hello("tenant-a", "token-a2")), absl::StatusCode::kOk);
  // Drop the token from the policy: no token needed any more.
  WritePolicy("");
  ASSERT_TRUE(manager_->Reload().ok());
  EXPECT_EQ(Code(Hello("tenant-a", "")), absl::StatusCode::kOk);
  EXPECT_FALSE(svc_->TenantHasToken("tenant-a"));
}

TEST_F(HelloTokenTest, AdminQuotaChangeKeepsTheTenantsToken) {
  Start();
  ASSERT_TRUE(manager_->Upsert("tenant-a", 2ull << 30, std::nullopt).ok());
  EXPECT_EQ(Code(Hello("tenant-a", "")), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code(Hello("tenant-a", "token-a")), absl::StatusCode::kOk);
  std::ifstream in(path_);
  std::string saved((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(Has(saved, common::Sha256Hex("token-a"))) << saved;
}

TEST_F(HelloTokenTest, NodesAndTheMastersOwnSessionsAreNotChecked) {
  Start({}, /*require=*/true);
  EXPECT_EQ(Code(Hello("", "", proto::Role::kNode)), absl::StatusCode::kOk);
  SessionId probe = svc_->OpenInternalSession("_probe");
  EXPECT_EQ(Code(svc_->Exist(probe, proto::KeysRequest{{"k"}}).status), absl::StatusCode::kOk);
  EXPECT_EQ(Rejects(), 0u);
}

TEST_F(HelloTokenTest, TenantIdRulesComeBeforeTheToken) {
  Start({}, /*require=*/true);
  proto::WireStatus st = Hello("_probe", "");
  EXPECT_EQ(Code(st), absl::StatusCode::kInvalidArgument) << st.message;
  EXPECT_EQ(Rejects(), 0u);
}

TEST(MasterOptionsTokenTest, RequireNeedsSomewhereForHashes) {
  MasterOptions o;
  o.require_tenant_tokens = true;
  absl::Status st = o.Validate();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(std::string(st.message()), "--require_tenant_tokens")) << st;
  o.tenant_tokens_file = "/etc/granary/tokens";
  EXPECT_TRUE(o.Validate().ok());
  o.tenant_tokens_file.clear();
  o.enable_multi_tenants = true;
  o.tenant_quota_connector_uri = "/etc/granary/tenant_quotas.yaml";
  EXPECT_TRUE(o.Validate().ok());
}

}  // namespace
}  // namespace granary::master
