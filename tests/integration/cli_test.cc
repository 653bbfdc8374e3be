// The granary CLI against a real master and node: 64 MiB round trip between separate processes,
// exit statuses (0 ok, 1 not found/refused, 2 usage/unreachable) and messages.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

class CliTest : public ::testing::Test {
 protected:
  // The master's flags; the admin tests turn quota and the admin token on.
  virtual std::vector<std::string> MasterFlags() { return {}; }
  void SetUp() override {
    Cluster::Options o;
    o.node_segment_size = "160MB";
    o.master_flags = MasterFlags();
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
  }
  // Runs `granary ARGS...`; returns the exit status, output in out_.
  int Run(std::vector<std::string> args, bool with_master = true) {
    std::vector<std::string> argv = {BinDir() + "/granary"};
    if (with_master) argv.push_back("--master=" + cluster_->master_address());
    for (auto& a : args) argv.push_back(a);
    std::string log = absl::StrCat(cluster_->dir(), "/cli", seq_++, ".log");
    auto p = Process::Start(argv, {}, log);
    EXPECT_TRUE(p.ok());
    int rc = (*p)->Wait();
    out_ = (*p)->Log();
    return rc;
  }
  // Runs an admin command against this master's admin API.
  int Admin(std::vector<std::string> args) {
    args.insert(args.begin(), absl::StrCat("--admin=127.0.0.1:", cluster_->master_http_port()));
    return Run(std::move(args), false);
  }
  std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::unique_ptr<Cluster> cluster_;
  std::string out_;
  int seq_ = 0;
};

TEST_F(CliTest, PutAndGetOf64MiBFileRoundTripsByteExact) {
  std::string in = cluster_->dir() + "/in.bin", out = cluster_->dir() + "/out.bin";
  std::string data = MakeValue("file", 1, 64 << 20);
  std::ofstream(in, std::ios::binary).write(data.data(), data.size());
  ASSERT_EQ(Run({"put", "model/layer0", in}), 0) << out_;
  EXPECT_NE(out_.find("GB/s"), std::string::npos) << out_;
  ASSERT_EQ(Run({"get", "model/layer0", out}), 0) << out_;
  EXPECT_TRUE(ReadFile(out) == data);
  ASSERT_EQ(Run({"stat", "model/layer0"}), 0) << out_;
  EXPECT_NE(out_.find("size: 67108864"), std::string::npos) << out_;
  ASSERT_EQ(Run({"ls", "model/"}), 0) << out_;
  EXPECT_NE(out_.find("model/layer0"), std::string::npos) << out_;
  ASSERT_EQ(Run({"segments"}), 0) << out_;
  EXPECT_NE(out_.find("host0"), std::string::npos) << out_;
  EXPECT_EQ(Run({"exists", "model/layer0"}), 0) << out_;
  EXPECT_EQ(Run({"rm", "model/layer0"}), 0) << out_;
  EXPECT_EQ(Run({"exists", "model/layer0"}), 1) << out_;
}

TEST_F(CliTest, ExitStatusesAndMessagesNameWhatFailed) {
  EXPECT_EQ(Run({"get", "nope", cluster_->dir() + "/x"}), 1);
  EXPECT_NE(out_.find("NOT_FOUND"), std::string::npos) << out_;
  EXPECT_NE(out_.find("nope"), std::string::npos) << out_;
  EXPECT_EQ(Run({"rm", "nope"}), 1);
  EXPECT_EQ(Run({"put", "k", "/nonexistent/file"}), 2);
  EXPECT_NE(out_.find("/nonexistent/file"), std::string::npos) << out_;
  EXPECT_EQ(Run({"frobnicate"}), 2);
  EXPECT_NE(out_.find("unknown command 'frobnicate'"), std::string::npos) << out_;
  EXPECT_EQ(Run({"get"}), 2);
  EXPECT_EQ(Run({"--tenant_id=_probe", "ls"}), 1);
  EXPECT_NE(out_.find("reserved"), std::string::npos) << out_;
  uint16_t dead = FreePort();
  EXPECT_EQ(Run({absl::StrCat("--master=127.0.0.1:", dead), "ls"}, /*with_master=*/false), 2);
  EXPECT_NE(out_.find(absl::StrCat("127.0.0.1:", dead)), std::string::npos) << out_;
  EXPECT_EQ(Run({"--master=nonsense", "ls"}, false), 2);
  EXPECT_NE(out_.find("'nonsense'"), std::string::npos) << out_;
}

// A get releases its read lease before its process exits: a script's `get` then `rm` of the
// same key is never refused HAS_LEASE.
TEST_F(CliTest, AGetReleasesItsLeaseBeforeTheProcessExits) {
  std::string in = cluster_->dir() + "/small.bin";
  std::ofstream(in) << "a small value";
  for (int i = 0; i < 10; ++i) {
    const std::string key = absl::StrCat("script/", i);
    ASSERT_EQ(Run({"put", key, in}), 0) << out_;
    ASSERT_EQ(Run({"get", key, cluster_->dir() + "/small.out"}), 0) << out_;
    ASSERT_EQ(Run({"rm", key}), 0) << "round " << i << ": " << out_;
  }
}

// A key a read lease holds (here lookup --lease's) is refused by rm, naming the lease, and
// removed by rm --force.
TEST_F(CliTest, RmForceRemovesALeasedKey) {
  const std::vector<std::string> kv = {"--model=m", "--hash_scheme=sha256"};
  std::vector<std::string> encode = kv;
  encode.insert(encode.end(), {"kvkey", "encode", "h0"});
  ASSERT_EQ(Run(encode), 0) << out_;
  const std::string key(absl::StripAsciiWhitespace(out_));
  std::string in = cluster_->dir() + "/kv.bin";
  std::ofstream(in) << "block 0";
  ASSERT_EQ(Run({"put", key, in}), 0) << out_;
  std::vector<std::string> lookup = kv;
  lookup.insert(lookup.end(), {"--lease", "lookup", "h0"});
  ASSERT_EQ(Run(lookup), 0) << out_;
  EXPECT_EQ(Run({"rm", key}), 1) << out_;
  EXPECT_NE(out_.find("HAS_LEASE"), std::string::npos) << out_;
  EXPECT_EQ(Run({"exists", key}), 0) << out_;
  EXPECT_EQ(Run({"--force", "rm", key}), 0) << out_;
  EXPECT_EQ(Run({"exists", key}), 1) << out_;
}

TEST_F(CliTest, TenantsDoNotSeeEachOthersKeys) {
  std::string a = cluster_->dir() + "/a.bin";
  std::ofstream(a) << "from tenant a";
  ASSERT_EQ(Run({"--tenant_id=tenant-a", "put", "shared-name", a}), 0) << out_;
  EXPECT_EQ(Run({"--tenant_id=tenant-b", "get", "shared-name", cluster_->dir() + "/b.out"}), 1);
  ASSERT_EQ(Run({"--tenant_id=tenant-a", "get", "shared-name", cluster_->dir() + "/a.out"}), 0);
  EXPECT_EQ(ReadFile(cluster_->dir() + "/a.out"), "from tenant a");
}

// Quota off: tenants is refused with the API's code; nodes and health work.
TEST_F(CliTest, AdminCommandsWithQuotaOff) {
  EXPECT_EQ(Admin({"tenants"}), 1) << out_;
  EXPECT_NE(out_.find("UNAVAILABLE_IN_CURRENT_MODE"), std::string::npos) << out_;
  EXPECT_NE(out_.find("--enable_multi_tenants"), std::string::npos) << out_;
  ASSERT_EQ(Admin({"nodes"}), 0) << out_;
  EXPECT_NE(out_.find("NODE"), std::string::npos) << out_;
  EXPECT_NE(out_.find("160 MB"), std::string::npos) << out_;
  EXPECT_NE(out_.find("shared"), std::string::npos) << out_;
  ASSERT_EQ(Admin({"health"}), 0) << out_;
  EXPECT_NE(out_.find("status: ok"), std::string::npos) << out_;
  EXPECT_NE(out_.find("role: active"), std::string::npos) << out_;
  EXPECT_NE(out_.find("multi_tenant: off"), std::string::npos) << out_;
  ASSERT_EQ(Admin({"health", "--deep"}), 0) << out_;
  EXPECT_NE(out_.find("deep: ok"), std::string::npos) << out_;
  // The admin address defaults to the master's host: given only --master, the CLI asks the
  // master's host (the message names the address it tried, or the call works when a master
  // listens on 9003 there).
  uint16_t dead = FreePort();
  int rc = Run({absl::StrCat("--master=127.0.0.1:", dead), "health"}, false);
  if (rc != 0) {
    EXPECT_NE(out_.find("127.0.0.1:9003"), std::string::npos) << out_;
  }
  EXPECT_EQ(Run({absl::StrCat("--admin=127.0.0.1:", dead), "nodes"}, false), 2);
  EXPECT_NE(out_.find(absl::StrCat("127.0.0.1:", dead)), std::string::npos) << out_;
  EXPECT_EQ(Run({"--admin=nonsense", "nodes"}, false), 2);
  EXPECT_NE(out_.find("'nonsense'"), std::string::npos) << out_;
}

class CliAdminTest : public CliTest {
 protected:
  std::vector<std::string> MasterFlags() override {
    char tmpl[] = "/tmp/granary_cli_admin_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/q.yaml") << "version: 1\ntenants:\n  - name: tenant-a\n    quota: 4MB\n";
    std::ofstream(dir_ + "/token") << "adm1n-t0ken\n";
    std::ofstream(dir_ + "/wrong") << "wrong\n";
    return {"--enable_multi_tenants", "--tenant_quota_connector_uri=" + dir_ + "/q.yaml",
            "--admin_token_file=" + dir_ + "/token"};
  }
  std::string dir_;
};

// Quota on, with an admin token: list, set, rm, and each error with the API's code.
TEST_F(CliAdminTest, TenantsSetListAndRemoveWithTheAdminToken) {
  const std::string token = "--admin_token_file=" + dir_ + "/token";
  ASSERT_EQ(Admin({"tenants"}), 0) << out_;  // reads need no token
  EXPECT_NE(out_.find("TENANT"), std::string::npos) << out_;
  EXPECT_NE(out_.find("tenant-a"), std::string::npos) << out_;
  EXPECT_NE(out_.find("4 MB"), std::string::npos) << out_;

  EXPECT_EQ(Admin({"tenants", "set", "tenant-x", "--quota=8MB"}), 1) << out_;
  EXPECT_NE(out_.find("UNAUTHENTICATED"), std::string::npos) << out_;
  EXPECT_EQ(
      Admin({"--admin_token_file=" + dir_ + "/wrong", "tenants", "set", "tenant-x", "--quota=8MB"}),
      1)
      << out_;
  EXPECT_NE(out_.find("UNAUTHENTICATED"), std::string::npos) << out_;
  ASSERT_EQ(Admin({token, "tenants", "set", "tenant-x", "--quota=8MB", "--max_entries=100"}), 0)
      << out_;
  EXPECT_NE(out_.find("tenant-x"), std::string::npos) << out_;
  EXPECT_NE(out_.find("8 MB"), std::string::npos) << out_;
  EXPECT_NE(out_.find("100"), std::string::npos) << out_;
  // --pool_spill reaches the policy (the FLAGS column), and leaving it out keeps it.
  ASSERT_EQ(Admin({token, "tenants", "set", "tenant-x", "--quota=8MB", "--pool_spill=true"}), 0)
      << out_;
  EXPECT_NE(out_.find("pool-spill"), std::string::npos) << out_;
  ASSERT_EQ(Admin({token, "tenants", "set", "tenant-x", "--quota=8MB"}), 0) << out_;
  EXPECT_NE(out_.find("pool-spill"), std::string::npos) << out_;
  ASSERT_EQ(Admin({token, "tenants", "set", "tenant-x", "--quota=8MB", "--pool_spill=false"}), 0)
      << out_;
  EXPECT_EQ(out_.find("pool-spill"), std::string::npos) << out_;
  EXPECT_EQ(Admin({token, "tenants", "set", "tenant-x", "--quota=8MB", "--pool_spill=maybe"}), 2);
  EXPECT_NE(out_.find("'maybe'"), std::string::npos) << out_;
  // --default_tier too (shown when not host): with gpu, a put that names no tier finds no GPU
  // segment in this cluster and is refused, naming the tier.
  ASSERT_EQ(Admin({token, "tenants", "set", "tenant-x", "--quota=8MB", "--default_tier=gpu"}), 0)
      << out_;
  EXPECT_NE(out_.find("tier=gpu"), std::string::npos) << out_;
  std::string tiny = dir_ + "/tiny.bin";
  std::ofstream(tiny) << "tiny";
  EXPECT_EQ(Run({"--tenant_id=tenant-x", "put", "on-gpu", tiny}), 1) << out_;
  EXPECT_NE(out_.find("gpu tier"), std::string::npos) << out_;
  ASSERT_EQ(Admin({token, "tenants", "set", "tenant-x", "--quota=8MB", "--default_tier=host"}), 0)
      << out_;
  EXPECT_EQ(out_.find("tier="), std::string::npos) << out_;
  EXPECT_EQ(Admin({token, "tenants", "set", "tenant-x", "--quota=8MB", "--default_tier=ssd"}), 2);
  EXPECT_NE(out_.find("tier 'ssd' is not one of host, gpu, any"), std::string::npos) << out_;
  // put --tier overrides the default: any lands on host here (no GPU segment), gpu is refused.
  ASSERT_EQ(Run({"--tenant_id=tenant-x", "--tier=any", "put", "by-any", tiny}), 0) << out_;
  EXPECT_EQ(Run({"--tenant_id=tenant-x", "--tier=gpu", "put", "by-gpu", tiny}), 1) << out_;
  EXPECT_NE(out_.find("gpu tier"), std::string::npos) << out_;
  // disk is a tier, but this cluster's node has no disk tier.
  EXPECT_EQ(Run({"--tenant_id=tenant-x", "--tier=disk", "put", "by-disk", tiny}), 1) << out_;
  EXPECT_NE(out_.find("disk tier"), std::string::npos) << out_;
  EXPECT_EQ(Run({"--tenant_id=tenant-x", "--tier=gpu", "get", "by-any"}), 2) << out_;
  EXPECT_NE(out_.find("--tier goes with put"), std::string::npos) << out_;
  ASSERT_EQ(Run({"--tenant_id=tenant-x", "rm", "by-any"}), 0) << out_;

  // An object of tenant-x shows in its charge and entries, and keeps it from being deleted.
  std::string file = dir_ + "/v.bin";
  std::ofstream(file) << std::string(4096, 'x');
  ASSERT_EQ(Run({"--tenant_id=tenant-x", "put", "k", file}), 0) << out_;
  ASSERT_EQ(Admin({"tenants"}), 0) << out_;
  size_t row = out_.find("tenant-x");
  ASSERT_NE(row, std::string::npos) << out_;
  std::string line = out_.substr(row, out_.find('\n', row) - row);
  EXPECT_NE(line.find(" 4.06 KB"), std::string::npos) << line;  // 4 KiB and its 64-byte header
  EXPECT_NE(line.find(" 1 "), std::string::npos) << line;
  EXPECT_EQ(Admin({token, "tenants", "rm", "tenant-x"}), 1) << out_;
  EXPECT_NE(out_.find("TENANT_NOT_EMPTY"), std::string::npos) << out_;
  ASSERT_EQ(Run({"--tenant_id=tenant-x", "rm", "k"}), 0) << out_;
  ASSERT_EQ(Admin({token, "tenants", "rm", "tenant-x"}), 0) << out_;
  EXPECT_NE(out_.find("tenant tenant-x deleted"), std::string::npos) << out_;
  ASSERT_EQ(Admin({"tenants"}), 0) << out_;
  EXPECT_EQ(out_.find("tenant-x"), std::string::npos) << out_;

  // Bad input: the CLI names the value before any call; the API names what it refuses.
  EXPECT_EQ(Admin({token, "tenants", "set", "tenant-x", "--quota=lots"}), 2) << out_;
  EXPECT_NE(out_.find("'lots'"), std::string::npos) << out_;
  EXPECT_EQ(Admin({token, "tenants", "set", "tenant-x", "--quota=1MB", "--max_entries=-3"}), 2);
  EXPECT_NE(out_.find("'-3'"), std::string::npos) << out_;
  EXPECT_EQ(Admin({token, "tenants", "set", "tenant-x"}), 2) << out_;
  EXPECT_NE(out_.find("--quota"), std::string::npos) << out_;
  EXPECT_EQ(Admin({"tenants", "--quota=1MB"}), 2) << out_;
  EXPECT_EQ(Admin({"tenants", "frob", "x"}), 2) << out_;
  EXPECT_EQ(Admin({token, "tenants", "set", "_probe", "--quota=1MB"}), 1) << out_;
  EXPECT_NE(out_.find("_probe"), std::string::npos) << out_;
  EXPECT_EQ(Admin({token, "tenants", "rm", "nobody"}), 1) << out_;
  EXPECT_NE(out_.find("TENANT_NOT_FOUND"), std::string::npos) << out_;
  EXPECT_NE(out_.find("nobody"), std::string::npos) << out_;
  EXPECT_EQ(Admin({"--admin_token_file=/nonexistent/token", "tenants"}), 2) << out_;
  EXPECT_NE(out_.find("/nonexistent/token"), std::string::npos) << out_;
  ASSERT_EQ(Admin({"health"}), 0) << out_;
  EXPECT_NE(out_.find("multi_tenant: on"), std::string::npos) << out_;
}

}  // namespace
}  // namespace granary::testing
